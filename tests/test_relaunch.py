"""Transient launch failures: which failed starts are the host's doing (tried again on a fresh
port, the launch record says why) and which are the revision's (one start, an error cell).

The warm-up case is SGLang killing itself when its own warm-up cannot connect to its own HTTP
port on a loaded host; the text below is that log as seen on the H200, the fault hook of the
reference server (fixtures/refserver/warmup.py) writes it for the end-to-end runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, make_sglang_repo
from harness.results import Launch, Role
from harness.server import launch
from harness.targets import PORT_TAKEN, TRANSIENT_LAUNCH_FAILURES, WARMUP_REFUSED

sys.path.append(str(ROOT / "fixtures"))
from refserver import warmup  # noqa: E402  (the fixture's texts: no torch at import)

# The lines an H200 server log held (2026-12-02), frames between them left out as the log's
# own "..." leave them out.
H200_LOG = """[2026-12-02 04:04:41] INFO:     Started server process [21221]
[2026-12-02 04:04:41] INFO:     Waiting for application startup.
[2026-12-02 04:04:58] Initialization failed. warmup error: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/urllib3/connection.py", line 198, in _new_conn
    sock = connection.create_connection(
ConnectionRefusedError: [Errno 111] Connection refused

The above exception was the direct cause of the following exception:

urllib3.exceptions.MaxRetryError: HTTPConnectionPool(host='127.0.0.1', port=46117): Max retries exceeded with url: /model_info (Caused by NewConnectionError("<urllib3.connection.HTTPConnection object at 0x7f2b3c>: Failed to establish a new connection: [Errno 111] Connection refused"))

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/http_server.py", line 2130, in _execute_server_warmup
    res = requests.get(
requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=46117): Max retries exceeded with url: /model_info (Caused by NewConnectionError("<urllib3.connection.HTTPConnection object at 0x7f2b3c>: Failed to establish a new connection: [Errno 111] Connection refused"))

[2026-12-02 04:04:58] kill_process_tree called: parent_pid=21221, include_parent=True, pid=21221
"""
FAILURE = "server was killed by SIGKILL before becoming healthy"


def failed_start(log: str) -> str:
    """The text a failed attempt is judged by: the failure, then what the attempt logged."""
    return f"{FAILURE}\n{log}"


def transient_kind(text: str, port: int):
    return next((k for k in TRANSIENT_LAUNCH_FAILURES if k.matches(text, port)), None)


def test_the_h200_warmup_failure_is_transient_on_its_own_port_only():
    assert transient_kind(failed_start(H200_LOG), 46117) is WARMUP_REFUSED
    # The same text at another launch's port: some other server's warm-up, not this one's.
    assert transient_kind(failed_start(H200_LOG), 46118) is None
    assert transient_kind(failed_start(H200_LOG), 4611) is None


def test_the_fixture_writes_what_the_h200_log_holds():
    text = warmup.REFUSED.replace("{host}", "127.0.0.1").replace("{port}", "46117")
    assert transient_kind(failed_start(f"[t] Initialization failed. warmup error: {text}"), 46117) is WARMUP_REFUSED
    assert transient_kind(failed_start(f"[t] Initialization failed. warmup error: {warmup.CRASH}"), 46117) is None


@pytest.mark.parametrize("log", [
    # The warm-up request itself failed (the scheduler crashed): the revision's doing.
    "Initialization failed. warmup error: " + warmup.CRASH,
    # A refused connection to another port (a router, a distributed init) after the warm-up line.
    H200_LOG.replace("port=46117", "port=30000"),
    # The connection broke off mid-request: no refused connect to the port.
    "Initialization failed. warmup error: Traceback (most recent call last):\nrequests.exceptions."
    "ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))",
    # Refused connections to the server's own port, but no warm-up failure after them: a crash
    # elsewhere that merely mentions the port.
    H200_LOG.replace("Initialization failed. warmup error: ", ""),
    "ERROR: [Errno 111] Connection refused HTTPConnectionPool(host='127.0.0.1', port=46117)\n"
    "Initialization failed. warmup error: Traceback (most recent call last):\nAssertionError: <Response [500]>",
    # Any other crash.
    "Traceback (most recent call last):\nAssertionError: speculative_num_draft_tokens must be > 1",
])
def test_other_failed_starts_are_not_transient(log):
    assert transient_kind(failed_start(log), 46117) is None


def test_a_port_taken_is_transient_however_it_is_said():
    assert transient_kind(failed_start("ERROR: [Errno 98] error while attempting to bind on address "
                                       "('127.0.0.1', 46117): address already in use"), 46117) is PORT_TAKEN
    assert transient_kind("port 46117 is answered by another process (pid 7), not by this server: "
                          "address already in use", 46117) is PORT_TAKEN
    assert transient_kind(failed_start("OSError: [Errno 98] Address already in use"), 1) is PORT_TAKEN


def test_launch_records_round_trip_and_old_ones_read_as_never_relaunched():
    launch_record = Launch("det", Role.BASE, "a" * 40, 46118, 3.5, True, ("--port", "46118"),
                           started_at=1.0, ended_at=2.0, relaunched=(WARMUP_REFUSED.reason,))
    d = json.loads(json.dumps(launch_record.to_dict()))
    assert d["relaunched"] == [WARMUP_REFUSED.reason]
    assert Launch.from_dict(d) == launch_record
    plain = Launch("det", Role.BASE, "a" * 40, 46118, 3.5, True)
    assert "relaunched" not in plain.to_dict()  # a run without relaunches writes what it always did
    assert Launch.from_dict(plain.to_dict()).relaunched == ()


def fake_server(port: int) -> list[str]:
    """A process that does what SGLang does when its warm-up could not reach its own port."""
    return [sys.executable, "-c", f"from refserver import warmup; warmup.fail_if_asked('127.0.0.1', {port})"]


@pytest.mark.slow
def test_a_warmup_refused_on_every_start_is_tried_twice_then_reported(tmp_path):
    log = tmp_path / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "fixtures"), warmup.FAULT_ENV: "refused"}
    heard = []
    launched = launch(fake_server, env, log, None, 60, TRANSIENT_LAUNCH_FAILURES, on_relaunch=heard.append)
    assert heard == [WARMUP_REFUSED.reason]
    assert launched.relaunched == (WARMUP_REFUSED.reason,)
    assert str(launched.failure) == f"{FAILURE}, on each of 2 ports tried ({WARMUP_REFUSED.reason})"
    assert log.read_text().count("Initialization failed. warmup error") == 2  # both starts, one log


def suite_text(state: Path) -> str:
    """One configuration per warm-up fault, its first start failing (a claim directory each)."""
    configs = "".join(f"""[[config]]
name = "{fault}-once"
deterministic = true
probes = ["kl"]
env = {{ {warmup.FAULT_ENV} = "{fault}", {warmup.ONCE_ENV} = "{state / (fault + '-once')}" }}
""" for fault in ("refused", "crash"))
    return f"""name = "relaunch"
[models]
sglang = "{ROOT / 'fixtures/refmodels/hybrid'}"
[server]
startup_timeout_s = 300
[workload]
prompts = 2
prompt_len = [12, 16]
output_len = 4
{configs}"""


@pytest.mark.slow
def test_a_warmup_refused_once_is_relaunched_and_a_warmup_crash_is_not(tmp_path):
    """The reference server, started as SGLang: in each configuration the first start fails its
    warm-up and later ones warm up. Refused connections to its own port: started again, its
    cells measured; a crash in the warm-up: one start, the row's error as ever."""
    repo = make_sglang_repo(tmp_path)
    suite = tmp_path / "suite.toml"
    state = tmp_path / "state"
    suite.write_text(suite_text(state))
    out = tmp_path / "out"
    proc = detcheck("run", "--target", "sglang", "--repo", str(repo), "--base", "main~1", "--candidate", "main",
                    "--suite", str(suite), "--out", str(out), "--format", "json", "--no-progress",
                    env={"PYTHONPATH": str(ROOT / "fixtures")})
    result = json.loads((out / "results.json").read_text())
    cells = {(c["config"], c["role"]): c for c in result["cells"]}
    launches = {(l["config"], l["role"]): l for l in result["launches"]}

    # refused-once: every cell measured; the one launch whose first start was refused says so.
    assert {cells[("refused-once", role)]["status"] for role in ("base", "candidate")} == {"ok"}
    relaunched = [key for key, l in launches.items() if key[0] == "refused-once" and l.get("relaunched")]
    assert len(relaunched) == 1, result["launches"]
    (config, role), = relaunched
    assert launches[(config, role)]["relaunched"] == [WARMUP_REFUSED.reason]
    assert launches[(config, role)]["ok"] is True
    assert len((state / "refused-once" / "starts").read_text().split()) == 3  # two roles, one relaunch
    log = server_log(out, config, role).read_text()
    assert log.count("Initialization failed. warmup error") == 1  # the first start's words …
    assert log.index("Initialization failed. warmup error") < log.index("The server is fired up")  # … then the second's
    assert f"detcheck: launching {config} @ {role} (" in proc.stderr
    assert f"again on a fresh port: {WARMUP_REFUSED.reason}" in proc.stderr
    report = (out / "report.md").read_text()
    assert f"- relaunched {config} @ {role}: started 2 times: {WARMUP_REFUSED.reason}" in report

    # crash-once: the start that crashed in its warm-up was not tried again.
    crashed = [role for role in ("base", "candidate") if cells[("crash-once", role)]["status"] == "error"]
    assert len(crashed) == 1, [cells[("crash-once", r)]["reason"] for r in ("base", "candidate")]
    role = crashed[0]
    assert cells[("crash-once", role)]["reason"] == f"launch failed: {FAILURE}"
    assert "relaunched" not in launches[("crash-once", role)]
    assert len((state / "crash-once" / "starts").read_text().split()) == 2  # one start per role
    assert server_log(out, "crash-once", role).read_text().count("Initialization failed. warmup error") == 1
    assert not [line for line in proc.stderr.splitlines() if "again on a fresh port" in line and "crash-once" in line]
    assert proc.returncode == 1, proc.stderr[-2000:]  # the crash's error cell


def server_log(out: Path, config: str, role: str) -> Path:
    (path,) = (out / "logs").glob(f"{config}-{role}-*.log")
    return path
