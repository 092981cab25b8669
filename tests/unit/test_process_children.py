"""devtools.processes.children: the pids a starter's servers have, which a signal to the
starter's process group no longer reaches once they run in groups of their own (make run's
servers); conformance_clusters' SIGKILL fallback names them from it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from devtools.processes import children

# A starter that starts one child in a process group of its own, says its pid, and waits.
STARTER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
print(child.pid, flush=True)
child.wait()
"""


def test_children_names_a_child_outside_the_starters_process_group():
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    child = int(starter.stdout.readline())
    try:
        assert children(starter.pid) == [child]
        assert os.getpgid(child) == child != os.getpgid(starter.pid)
    finally:
        os.kill(child, signal.SIGKILL)
        starter.wait(timeout=30)
    assert children(starter.pid) == []  # gone, and nothing read where nothing is
