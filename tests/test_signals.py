"""harness.cli's signal handling: a termination signal ends the run whichever thread takes it.

The kernel may give a signal sent to the process to any of its threads; Python then only marks
it tripped, and a main thread asleep in an untimed lock wait (run_scheduled's Future.result)
would never run the handler (the hang of test_faults' hangup-while-servers-start loop under
load). Here a worker thread takes the signal itself, every time: the kernel's rare choice made
deterministic."""

import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pthread_kill and SIGURG as on Linux")

# The main thread waits on a future no one completes, as run_scheduled waits on its jobs; the
# worker that would complete it takes the signal instead, once the main thread is asleep in that
# wait (past `waiting`, in a futex: /proc's wchan), where nothing but a signal of its own wakes it.
CHILD = textwrap.dedent("""
    import signal, sys, threading
    from concurrent.futures import Future
    from harness.cli import install_signal_handlers
    install_signal_handlers()
    waiting = threading.Event()
    main = threading.main_thread().native_id
    def take_the_signal():
        waiting.wait()
        while "futex" not in open(f"/proc/self/task/{{main}}/wchan").read():
            threading.Event().wait(0.01)
        signal.pthread_kill(threading.get_ident(), signal.{sig})
        threading.Event().wait()
    threading.Thread(target=take_the_signal, daemon=True).start()
    try:
        waiting.set()
        Future().result()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
""")


def _default_signals() -> None:
    # A test run started in the background inherits SIGINT ignored, and Python then installs no
    # handler for it: the child must see the signals as a terminal's detcheck does.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_taken_by_a_worker_thread_interrupts_the_waiting_main_thread(sig):
    child = subprocess.run([sys.executable, "-c", CHILD.format(sig=sig)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, preexec_fn=_default_signals)  # without the nudge: never
    assert (child.returncode, child.stdout) == (130, "interrupted\n"), child.stderr[-2000:]
