"""`dlscale explain`: why a run's number is below the published one, and what to change.

    explain("runs/bench-...", reference=None)   -> [Explanation]: the findings ranked by estimated effect
    text.lines(explanation)                      -> what the terminal shows
    against.lines(read_run(a), read_run(b))      -> what differs between two runs' records

Reads run directories only, through dlscale.rundir (no torch: an import contract); estimates come from
shipped published figures, datasheet peaks and the run's own measurements (docs/explain.md).
"""
