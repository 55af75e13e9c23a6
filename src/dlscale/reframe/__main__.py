"""`python -m dlscale.reframe`: the path of the ReFrame test file, for `reframe -c $(python -m dlscale.reframe)`."""

from dlscale.reframe import CHECKS

print(CHECKS)
