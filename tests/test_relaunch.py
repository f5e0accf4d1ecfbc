"""Transient launch failures: which failed starts are the host's doing (tried again on a fresh
port, the launch record says why) and which are the revision's (one start, an error cell).

The warm-up case is SGLang killing itself when its own warm-up cannot connect to its own HTTP
port on a loaded host. tests/data/h200-warmup-refused.log is such a server's whole log from the
H200 (results/h200/pool-order, Inkling `lazy-graphs-off` base, port 46117): uvicorn could not
bind the port, then the warm-up polled it for two and a half minutes and killed the server. The
reference server's fault hook (fixtures/refserver/warmup.py) writes the same lines for the
end-to-end runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, make_sglang_repo
from harness.results import Launch, Role
from harness import server
from harness.server import launch
from harness.targets import HOST, PORT_TAKEN, TRANSIENT_LAUNCH_FAILURES, WARMUP_REFUSED

sys.path.append(str(ROOT / "fixtures"))
from refserver import warmup  # noqa: E402  (the fixture's texts: no torch at import)

H200_LOG = (Path(__file__).parent / "data" / "h200-warmup-refused.log").read_text()
H200_PORT = 46117
BIND_FAILURE = f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {H200_PORT}): address already in use"
# The same death with uvicorn's bind failure left out: the warm-up's refusals alone.
H200_WARMUP_ONLY = "\n".join(line for line in H200_LOG.splitlines() if BIND_FAILURE not in line)
FAILURE = "server was killed by SIGKILL before becoming healthy"


def failed_start(log: str) -> str:
    """The text a failed attempt is judged by: the failure, then what the attempt logged."""
    return f"{FAILURE}\n{log}"


def transient_kind(text: str, port: int):
    return next((k for k in TRANSIENT_LAUNCH_FAILURES if k.matches(text, port)), None)


def test_the_h200_death_is_named_by_its_cause_a_port_taken():
    assert BIND_FAILURE in H200_LOG and H200_WARMUP_ONLY != H200_LOG
    # The cause lies above the warm-up's traceback, out of reach of the log's last 30 lines.
    assert BIND_FAILURE not in "\n".join(H200_LOG.splitlines()[-30:])
    assert transient_kind(failed_start(H200_LOG), H200_PORT) is PORT_TAKEN


def test_the_h200_warmup_refused_alone_is_transient_on_its_own_port_only():
    assert transient_kind(failed_start(H200_WARMUP_ONLY), H200_PORT) is WARMUP_REFUSED
    # The same text at another launch's port: some other server's warm-up, not this one's.
    assert transient_kind(failed_start(H200_WARMUP_ONLY), H200_PORT + 1) is None
    assert transient_kind(failed_start(H200_WARMUP_ONLY), H200_PORT // 10) is None


def test_the_fixture_writes_what_the_h200_log_holds():
    text = warmup.REFUSED.replace("{host}", "127.0.0.1").replace("{port}", "46117")
    assert transient_kind(failed_start(f"[t] Initialization failed. warmup error: {text}"), 46117) is WARMUP_REFUSED
    assert transient_kind(failed_start(f"[t] Initialization failed. warmup error: {warmup.CRASH}"), 46117) is None


@pytest.mark.parametrize("log", [
    # The warm-up request itself failed (the scheduler crashed): the revision's doing.
    "Initialization failed. warmup error: " + warmup.CRASH,
    # A refused connection to another port (a router, a distributed init) after the warm-up line.
    H200_WARMUP_ONLY.replace("port=46117", "port=30000"),
    # The connection broke off mid-request: no refused connect to the port.
    "Initialization failed. warmup error: Traceback (most recent call last):\nrequests.exceptions."
    "ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))",
    # Refused connections to the server's own port, but no warm-up failure after them: a crash
    # elsewhere that merely mentions the port.
    H200_WARMUP_ONLY.replace("Initialization failed. warmup error: ", ""),
    "ERROR: [Errno 111] Connection refused HTTPConnectionPool(host='127.0.0.1', port=46117)\n"
    "Initialization failed. warmup error: Traceback (most recent call last):\nAssertionError: <Response [500]>",
    # Any other crash.
    "Traceback (most recent call last):\nAssertionError: speculative_num_draft_tokens must be > 1",
    # A crash whose log merely mentions a port taken: a warning, another port's bind, an
    # exception handled before the one that killed the server.
    "WARNING: metrics exporter: [Errno 98] address already in use; metrics stay off\n"
    "Traceback (most recent call last):\nRuntimeError: CUDA error: no kernel image is available",
    "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
    "OSError: [Errno 98] Address already in use\nfalling back to another port\n"
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
    """A process that dies as SGLang does when its warm-up could not reach its own port."""
    return [sys.executable, "-c", f"from refserver import warmup; warmup.fail_if_asked('127.0.0.1', {port})"]


@pytest.mark.slow
@pytest.mark.parametrize("fault, kind", [("refused", WARMUP_REFUSED), ("port-taken", PORT_TAKEN)])
def test_a_start_failing_every_time_is_tried_as_often_as_its_kind_allows(tmp_path, fault, kind):
    """The H200's death (port-taken: the bind failure above the warm-up's long traceback) gets
    the three starts of any taken port; the warm-up refused alone gets two."""
    log = tmp_path / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "fixtures"), warmup.FAULT_ENV: fault}
    heard = []
    launched = launch(fake_server, env, log, None, 60, TRANSIENT_LAUNCH_FAILURES, on_relaunch=heard.append)
    assert heard == list(launched.relaunched) == [kind.reason] * kind.retries
    assert str(launched.failure) == f"{FAILURE}, on each of {kind.retries + 1} ports tried ({kind.reason})"
    assert log.read_text().count("Initialization failed. warmup error") == kind.retries + 1  # every start, one log


# configuration: (the fault of its first start, the relaunch it earns, or None: none)
FIRST_STARTS = {"port-taken-once": ("port-taken", PORT_TAKEN.reason),
                "refused-once": ("refused", WARMUP_REFUSED.reason),
                "crash-once": ("crash", None)}


def suite_text(state: Path) -> str:
    """One configuration per warm-up fault, its first start failing (a claim directory each)."""
    configs = "".join(f"""[[config]]
name = "{name}"
deterministic = true
probes = ["kl"]
env = {{ {warmup.FAULT_ENV} = "{fault}", {warmup.ONCE_ENV} = "{state / name}" }}
""" for name, (fault, _) in FIRST_STARTS.items())
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


@pytest.fixture(scope="module")
def first_starts_failed(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One run of the reference server, started as SGLang, whose configurations each fail their
    first start's warm-up (either role's: both start at once) and warm up on later starts."""
    root = tmp_path_factory.mktemp("relaunch")
    repo = make_sglang_repo(root)
    suite = root / "suite.toml"
    state = root / "state"
    suite.write_text(suite_text(state))
    out = root / "out"
    proc = detcheck("run", "--target", "sglang", "--repo", str(repo), "--base", "main~1", "--candidate", "main",
                    "--suite", str(suite), "--out", str(out), "--format", "json", "--no-progress",
                    env={"PYTHONPATH": str(ROOT / "fixtures")})
    return out, state, proc


def failed_first(out: Path, config: str) -> tuple[str, dict, dict]:
    """(role, its cell, its launch record) of the role whose first start failed."""
    result = json.loads((out / "results.json").read_text())
    cells = {c["role"]: c for c in result["cells"] if c["config"] == config}
    launches = {l["role"]: l for l in result["launches"] if l["config"] == config}
    failed = [role for role in cells if "Initialization failed. warmup error" in server_log(out, config, role).read_text()]
    assert len(failed) == 1, (config, result["launches"])
    return failed[0], cells, launches


@pytest.mark.slow
@pytest.mark.parametrize("config", ["port-taken-once", "refused-once"])
def test_a_start_killed_by_the_host_is_relaunched_and_measured(first_starts_failed, config):
    out, state, proc = first_starts_failed
    reason = FIRST_STARTS[config][1]
    role, cells, launches = failed_first(out, config)
    assert {cell["status"] for cell in cells.values()} == {"ok"}
    assert launches[role]["relaunched"] == [reason] and launches[role]["ok"] is True
    assert [l.get("relaunched") for r, l in launches.items() if r != role] == [None]
    assert len((state / config / "starts").read_text().split()) == 3  # two roles, one relaunch
    log = server_log(out, config, role).read_text()  # both starts, one log, in order
    assert log.count("Initialization failed. warmup error") == 1 and log.count("The server is fired up") == 1
    assert log.index("Initialization failed. warmup error") < log.index("The server is fired up")
    ref = {"base": "main~1", "candidate": "main"}[role]
    assert f"detcheck: launching {config} @ {role} ({ref}) again on a fresh port: {reason}\n" in proc.stderr
    report = (out / "report.md").read_text()
    assert f"- relaunched {config} @ {role}: started 2 times: {reason}" in report


@pytest.mark.slow
def test_a_start_that_crashed_in_its_warmup_is_not_relaunched(first_starts_failed):
    out, state, proc = first_starts_failed
    role, cells, launches = failed_first(out, "crash-once")
    # the crash's own last exception follows the reason (a crash is never mistaken for a refusal)
    assert cells[role]["status"] == "error" and cells[role]["reason"].startswith(f"launch failed: {FAILURE} ("), cells[role]["reason"]
    assert "relaunched" not in launches[role] and launches[role]["ok"] is False
    assert len((state / "crash-once" / "starts").read_text().split()) == 2  # one start per role
    assert not [line for line in proc.stderr.splitlines() if "again on a fresh port" in line and "crash-once" in line]
    assert proc.returncode == 1, proc.stderr[-2000:]  # the crash's error cell decides the run


def server_log(out: Path, config: str, role: str) -> Path:
    (path,) = (out / "logs").glob(f"{config}-{role}-*.log")
    return path


def test_a_servers_port_is_drawn_below_the_kernels_ephemeral_range():
    """Ports the kernel hands out on request (SGLang's NCCL port, every client connection's own
    end) come from the ephemeral range; a server's port, bound minutes after it is chosen, is
    drawn below it, so none of those can take it meanwhile."""
    ports = server.port_range()
    if ports is None:
        pytest.skip("the kernel does not say its ephemeral range here")
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    drawn = [server.free_port() for _ in range(20)]
    try:
        assert all(server._LOWEST_PORT <= p < low for p in drawn) and len(set(drawn)) == 20
        with socket.socket() as s:  # free when drawn: it binds
            s.bind((HOST, drawn[0]))
    finally:
        with server._lock:
            server._ports_taken.difference_update(drawn)
