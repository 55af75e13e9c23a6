"""Reports over run and sweep directories: tables, CSV files, plots, published references.

    build_report(paths, out_dir, references=["hal"])   -> report.md, *.csv, *.png
    load_reference("ngc")                              -> the published figures with sources

Names are loaded on first use (PEP 562), so that reading references (dlscale predict) does not
import matplotlib, which report building needs and which takes a second or more to import.
"""

from importlib import import_module

_EXPORTS = {
    "PLOTS": "build", "Report": "build", "build_report": "build",
    "Reference": "references", "load_reference": "references", "reference_names": "references",
}

__all__ = sorted([*_EXPORTS, "DEFAULT_TOLERANCE_PTS"])

DEFAULT_TOLERANCE_PTS = 1.0
"""Final top-1 may fall this many percentage points below the smallest batch before a run is
flagged. Run-to-run spread of ResNet-50 top-1 is far smaller (NVIDIA's 90-epoch AMP result:
77.12 +- 0.11, references/ngc.json); with 1.0 HAL's 64-GPU runs are flagged (Feb -1.14, May -4.66)
and all its others pass. Defined here, not in build.py, so that `dlscale report --help` shows it
without importing matplotlib."""


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"dlscale.report.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'dlscale.report' has no attribute {name!r}")
