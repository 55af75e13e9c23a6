"""Scaling sweeps: the plan (plan.py, plain data in) and running it through a launcher (run.py)."""
