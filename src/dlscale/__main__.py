"""`python -m dlscale` (and `torchrun ... -m dlscale`) run the command-line tool."""

import sys

from dlscale.cli import main

sys.exit(main())
