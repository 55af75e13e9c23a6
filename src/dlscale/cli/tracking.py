"""`--mlflow [URI]` and `--mlflow-experiment NAME`, shared by train, bench, scale and predict.

Imports no torch (predict starts without it); MLflow itself is imported only by the thread that
logs (dlscale.metrics.tracking).
"""

from __future__ import annotations

import argparse

from dlscale.metrics.tracking import TrackingTarget, tracking_target


def add_tracking_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mlflow", nargs="?", const="", default=None, metavar="URI",
                   help="also log the run to MLflow (rank 0): settings, metrics with their step, summary, run "
                        "directory files; to URI (http://host:5000, sqlite:///file.db, a folder), else "
                        "$MLFLOW_TRACKING_URI, else OUTPUT_DIR/mlflow.db (no server needed). pip install "
                        "'dlscale[mlflow]'")
    p.add_argument("--mlflow-experiment", default=None, metavar="NAME",
                   help="MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else dlscale)")


def tracking_from_args(args: argparse.Namespace, output_dir) -> TrackingTarget | None:
    """Where --mlflow sends the run, None without it; refused in one line without the MLflow client."""
    return tracking_target(args.mlflow, output_dir=output_dir, experiment=args.mlflow_experiment)
