"""`python -m tests.fault_campaign` (what `make fault-campaign` runs): the fault campaign of
tests/faults/campaign.py. Its exit code is 0 only when the checker found the history valid
and the cluster healed after every cycle (no problem printed)."""

from __future__ import annotations

import sys

from tests.faults.campaign import main

if __name__ == "__main__":
    sys.exit(main())
