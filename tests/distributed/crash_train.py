"""`dlscale` under torchrun with a worker that dies once: rank 1 exits hard after optimizer step
CRASH_AT_STEP on the first attempt.

The restart counter is read here only to inject the failure once; dlscale itself never uses it.
"""

import os
import sys

import dlscale.train.loop as loop
from dlscale.cli import main

CRASH_AT_STEP = int(os.environ.get("CRASH_AT_STEP", "7"))
steps = {"done": 0}
original_step = loop.train_step


def crashing_step(*args, **kwargs):
    loss = original_step(*args, **kwargs)
    steps["done"] += 1
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
    if first_attempt and os.environ.get("RANK") == "1" and steps["done"] == CRASH_AT_STEP:
        os._exit(3)
    return loss


loop.train_step = crashing_step
sys.exit(main(sys.argv[1:]))
