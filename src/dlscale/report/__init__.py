"""Reports over run and sweep directories: tables, CSV files, plots, published references.

    build_report(paths, out_dir, references=["hal"])   -> report.md, *.csv, *.png
    load_reference("ngc")                              -> the published figures with sources

Names are loaded on first use (PEP 562), so that reading references (dlscale predict) does not
import matplotlib, which report building needs and which takes a second or more to import.
"""

from importlib import import_module

_EXPORTS = {
    "DEFAULT_TOLERANCE_PTS": "build", "PLOTS": "build", "Report": "build", "build_report": "build",
    "Reference": "references", "load_reference": "references", "reference_names": "references",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"dlscale.report.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'dlscale.report' has no attribute {name!r}")
