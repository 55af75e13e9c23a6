"""dlscale's ReFrame test library (checks.py): `dlscale bench`, a scaling sweep and `dlscale comm`
as ReFrame regression tests, for sites that benchmark their clusters with ReFrame.

Point ReFrame at the file:

    reframe -C site.py -c $(python -m dlscale.reframe) -r
    reframe -C site.py -c $(python -c 'import dlscale.reframe as r; print(r.CHECKS)') -r

This package imports neither ReFrame nor torch; checks.py imports ReFrame and nothing of dlscale
(ReFrame loads it by path, perhaps with a Python that cannot import dlscale). docs/tools.md has
the variables, launchers and references.
"""

from __future__ import annotations

from pathlib import Path

CHECKS = Path(__file__).resolve().with_name("checks.py")
"""The test file to give `reframe -c`."""
REFERENCES_TEMPLATE = Path(__file__).resolve().with_name("references.json")
"""A site's performance references, to copy and fill in (DLSCALE_REFRAME_REFERENCES names the copy)."""
