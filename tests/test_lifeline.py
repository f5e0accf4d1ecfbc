"""The kernel's half of harness.lifeline: a server started with die_with_parent goes when the
process that started it is killed with SIGKILL (no handler of detcheck's runs then)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# The parent starts its child from a worker thread that lives on, as the harness starts servers.
PARENT = textwrap.dedent("""
    import subprocess, sys, threading, time
    from harness.lifeline import die_with_parent
    def start():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 preexec_fn=die_with_parent)
        print(child.pid, flush=True)
        time.sleep(600)
    threading.Thread(target=start, daemon=True).start()
    time.sleep(600)
""")


def test_a_server_started_with_die_with_parent_dies_with_a_killed_harness():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child_pid = int(parent.stdout.readline())
    child = psutil.Process(child_pid)
    assert child.is_running() and child.ppid() == parent.pid
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 120  # a bound for a loaded machine, not a speed target
    while time.monotonic() < deadline:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        child.kill()
        pytest.fail(f"child {child_pid} outlived its SIGKILLed parent by 120 s")
