"""Waiting on server processes: the exit wait and the health poll's interval."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness import server as server_module
from harness.server import LaunchCancelled, health_poll_s, launch, wait_exit


def sleeper(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_wait_exit_times_out_on_a_running_process_and_wakes_at_its_exit():
    proc = sleeper(0.5)
    try:
        assert wait_exit(proc, 0.05) is False and proc.returncode is None
        assert wait_exit(proc, 10.0) is True
        assert proc.returncode == 0  # reaped by the wait
    finally:
        proc.kill()
        proc.wait()


def test_wait_exit_notices_an_exit_at_once_and_a_reaped_process_is_done():
    proc = sleeper(0.0)
    time.sleep(0.5)  # exited, not yet reaped
    t0 = time.monotonic()
    assert wait_exit(proc, 60.0) is True
    assert time.monotonic() - t0 < 30  # noticed, not waited out (a loaded machine may be slow to do it)
    assert wait_exit(proc, 10.0) is True  # already reaped: no wait on a pid that may be reused


def test_the_health_poll_grows_with_the_wait_within_its_bounds():
    assert health_poll_s(0.0) == 0.02
    assert health_poll_s(1.3) == 0.05 * 1.3  # the reference server's start: noticed within 65 ms
    assert health_poll_s(120.0) == 0.25  # a GPU server's minute of loading: as before


def test_a_log_read_past_its_cap_is_refused_naming_the_cap(tmp_path, monkeypatch):
    from harness import bounded, server
    from harness.server import ServerProcess

    monkeypatch.setattr(server, "SERVER_LOG", bounded.SizeCap(2**20, "a server's log"))
    log = tmp_path / "server.log"
    log.write_bytes(b"Prefill batch\n" * (2**20 // 14 + 1000))
    proc = ServerProcess(["true"], {}, log, port=1)
    assert proc.log_since(log.stat().st_size - 28) == "Prefill batch\n" * 2
    with pytest.raises(bounded.TooLarge, match=rf"^{log}: larger than 1 MiB, the most detcheck reads of a server's log$"):
        proc.log_since(0)


def test_a_health_answer_trickled_a_byte_at_a_time_is_not_healthy_past_the_startup_deadline(tmp_path):
    """The fault server's trickle-health: each byte well within a read timeout, the answer two
    minutes long. Read to its end, it would be a 200: healthy."""
    from conftest import ROOT
    from harness.errors import LaunchError
    from harness.server import ServerProcess, free_port

    port = free_port()
    proc = ServerProcess([sys.executable, "-m", "faults", "--model-path", "m", "--port", str(port),
                          "--fault", "trickle-health"], {"PYTHONPATH": str(ROOT / "fixtures")},
                         tmp_path / "server.log", port)
    proc.start()
    try:
        with pytest.raises(LaunchError, match=r"^server not healthy after 2 s$"):
            proc.wait_healthy(timeout_s=2)
    finally:
        proc.stop()


# A server that never answers its health checks: only the interrupt can end its wait early.
NEVER_HEALTHY = [sys.executable, "-c", "import time; time.sleep(600)"]


def test_an_interrupt_during_the_health_wait_stops_the_server_it_waits_for(tmp_path):
    """An interrupt stops the servers registered when it comes; one whose start was in flight
    then is left to its own thread, which must stop it at its next poll, not at the end of the
    startup timeout (the SIGHUP hang of test_faults)."""
    looks = iter([False, False, True])  # before the attempt, the first poll, then interrupted
    started: list = []

    def argv(port: int) -> list[str]:
        started.append(port)
        return NEVER_HEALTHY

    with pytest.raises(LaunchCancelled, match="interrupted while this server started"):
        launch(argv, {}, tmp_path / "log", None, 600, (), cancelled=lambda: next(looks))
    assert len(started) == 1 and not server_module._live  # stopped, and its registration gone


def test_an_interrupt_before_an_attempt_starts_no_server(tmp_path):
    started: list = []
    with pytest.raises(LaunchCancelled, match="interrupted before this server started"):
        launch(lambda port: started.append(port) or NEVER_HEALTHY, {}, tmp_path / "log", None, 600, (),
               cancelled=lambda: True)
    assert started == []
