"""`python -m tests.fault_campaign` (what `make fault-campaign` runs): the fault campaign of
tests/faults/campaign.py, whose checker's verdict is its exit code."""

from __future__ import annotations

import sys

from tests.faults.campaign import main

if __name__ == "__main__":
    sys.exit(main())
