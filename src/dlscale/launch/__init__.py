"""Starting processes: on this host (local.py: torchrun lines, process trees) and on SLURM (slurm.py)."""
