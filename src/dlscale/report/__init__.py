"""Reports over run and sweep directories: tables, CSV files, plots, published references.

    build_report(paths, out_dir, references=["hal"])   -> report.md, *.csv, *.png
    load_reference("ngc")                              -> the published figures with sources
"""

from dlscale.report.build import DEFAULT_TOLERANCE_PTS, PLOTS, Report, build_report
from dlscale.report.references import Reference, load_reference, reference_names

__all__ = ["DEFAULT_TOLERANCE_PTS", "PLOTS", "Report", "Reference", "build_report", "load_reference",
           "reference_names"]
