"""Faults end to end: real `detcheck run` processes against fault servers over real HTTP.

Each fault is a cell result (status, reason, the server's last log lines), never a hung or
crashed suite, and no process a run started outlives it (checked with psutil through an
environment tag every process of a test inherits). One run carries a configuration per
launch/request fault, side by side with a healthy one, so it also shows that the other cells
go on; interruption, resume and the results store have their own runs.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, TAG, detcheck, leftovers, tagged
from faultlib import Bench, cells, interrupt

pytestmark = [pytest.mark.faults, pytest.mark.slow]  # every test starts servers

# configuration: (fault server args, status of both cells, reason pattern, log-tail pattern)
FAULTS = {
    "healthy": ([], "ok", r"^$", ""),
    "exit-assert": (["--fault", "exit-assert"], "error",
                    r"^launch failed: server exited with code 1 before becoming healthy",
                    r"AssertionError: speculative_num_draft_tokens must be > 1"),
    "exit-oom": (["--fault", "exit-oom"], "error",
                 r"^launch failed: server was killed by SIGKILL before becoming healthy",
                 r"CUDA out of memory"),
    "bad-flag": (["--random-seed", "seven"], "error",
                 r"^launch failed: server exited with code 2 before becoming healthy",
                 r"argument --random-seed: invalid int value: 'seven'"),
    "never-healthy": (["--fault", "never-healthy", "--spawn-child"], "error",
                      r"^launch failed: server not healthy after 20 s", r"ready to roll"),
    "hang": (["--fault", "hang-generate"], "error", r"^POST /generate: no answer within 1 s$", ""),
    "sigkill": (["--fault", "sigkill-generate", "--spawn-child"], "finding",
                r"^server died during this probe \(server was killed by SIGKILL\) \(request: POST /generate: "
                r"connection failed", ""),
    "die-second-batch": (["--fault", "die-second-batch"], "finding",
                         r"^server died during this probe \(server was killed by SIGKILL\): RuntimeError: CUDA "
                         r"error: device-side assert triggered \(in store_kvcache\)", r"device-side assert"),
    "malformed-json": (["--fault", "malformed-json"], "error",
                       r"^/generate: malformed JSON \(HTTP 200, \d+ bytes", ""),
    "truncated-json": (["--fault", "truncated-json"], "error",
                       r"^POST /generate: answer broken off .*IncompleteRead", ""),
    "http-500": (["--fault", "http-500"], "error",
                 r"^/generate: HTTP 500: CUDA error: an illegal memory access", ""),
    "null-logprobs": (["--fault", "null-logprobs"], "finding",
                      r"^decode returned null output logprobs on 2 of 2 prompts \(first at position 0 of prompt 0\)$", ""),
    "null-replay": (["--fault", "null-replay-logprobs"], "finding",
                    r"^cold replay returned null input logprobs on 2 of 2 prompts \(first at position \d+ of "
                    r"prompt 0\)$", ""),
    "flush-busy": (["--fault", "flush-busy"], "error",
                   r"^/flush_cache: still busy after \d+ tries over 1 s: Cache not flushed", ""),
    "flush-busy-then-idle": (["--fault", "flush-busy", "--fault-requests", "2"], "ok", r"^$", ""),
    "port-in-use": (["--fault", "port-in-use"], "error",
                    r"^launch failed: server exited with code 1 before becoming healthy, on each "
                    r"of 3 ports tried \(address already in use\)$", r"address already in use"),
    "port-in-use-once": (["--fault", "port-in-use", "--fault-launches", "1"], "ok", r"^$", ""),
    "child-ignores-sigterm": (["--spawn-child"], "ok", r"^$", ""),
    # A crash whose log mentions a port taken, not as its cause: one start, its own error.
    "mentions-port-in-use": (["--fault", "mentions-port-in-use"], "error",
                             r"^launch failed: server exited with code 1 before becoming healthy "
                             r"\(RuntimeError: CUDA error: no kernel image is available for execution on the device\)$",
                             r"RuntimeError: CUDA error: no kernel image is available"),
    # Answers that come a byte at a time, each byte well within any read timeout: cut off at the
    # suite's whole-request deadlines (20 s to be healthy, 1 s a request), not minutes later.
    "trickle-health": (["--fault", "trickle-health"], "error", r"^launch failed: server not healthy after 20 s", ""),
    "trickle-generate": (["--fault", "trickle-generate"], "error", r"^POST /generate: no answer within 1 s$", ""),
    # 1 GiB of an answer, read to the cap ($DETCHECK_MAX_ANSWER_MB=1 here) and refused.
    "huge-generate": (["--fault", "huge-generate"], "error",
                      r"^POST /generate: answer larger than 1 MiB, the most detcheck reads of a server's answer$", ""),
}
# Launches a configuration took over both roles (a port in use is retried on a fresh port).
LAUNCHES = {"port-in-use": 6, "port-in-use-once": 3}
SECRETS = {"HF_TOKEN": "hf-value-" + uuid.uuid4().hex, "MY_API_KEY": "key-value-" + uuid.uuid4().hex,
           "DB_SECRET": "secret-value-" + uuid.uuid4().hex}
CALLER_SECRET = ("SERVICE_TOKEN", "caller-token-" + uuid.uuid4().hex)


def listening(tag: str) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket a tagged process listens on."""
    found = set()
    for proc in tagged(tag):
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in proc.net_connections("tcp")
                      if c.status == psutil.CONN_LISTEN}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


# The faults that are about a suite timeout run with that timeout short; every other wait of the
# matrix is faultlib's generous default, so that a loaded machine fails no healthy start or answer.
# The startup timeout bounds each revision's `--help` too: 20 s, which a loaded machine's --help
# stays under, and far below the default that a wait not bounded by it would run to.
SHORT_TIMEOUTS = {"never-healthy": {"startup_timeout_s": 20}, "trickle-health": {"startup_timeout_s": 20},
                  "hang": {"request_timeout_s": 1}, "trickle-generate": {"request_timeout_s": 1},
                  "flush-busy": {"request_timeout_s": 1}, "flush-busy-then-idle": {"request_timeout_s": 1}}


@dataclass
class Matrix:
    bench: Bench
    cache: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def result(self) -> dict:
        return self.bench.result()


@dataclass
class Matrices:
    """The fault configurations, one run per set of suite timeouts, all at once."""

    runs: list[Matrix]
    sockets: set[tuple[str, int]] = field(default_factory=set)  # seen listening during the runs

    def of(self, config: str) -> Matrix:
        return next(run for run in self.runs if cells(run.result, config))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, bare_python) -> Matrices:
    """Runs over every configuration above, watching the sockets their servers listen on."""
    groups: dict[tuple, list[str]] = {}
    for name in FAULTS:
        groups.setdefault(tuple(sorted(SHORT_TIMEOUTS.get(name, {}).items())), []).append(name)
    matrices = Matrices([])
    for timeouts, names in groups.items():
        bench = Bench(tmp_path_factory.mktemp("matrix"), bare_python)
        bench.write_suite({name: FAULTS[name][0] for name in names}, **dict(timeouts), env=SECRETS)
        matrices.runs.append(Matrix(bench, bench.root / "cache"))
    done = threading.Event()

    def watch():
        while not done.is_set():
            for run in matrices.runs:
                matrices.sockets.update(listening(run.tag))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        procs = [run.bench.start(env={TAG: run.tag, "DETCHECK_CACHE_DIR": str(run.cache),
                                      "DETCHECK_MAX_ANSWER_MB": "1",
                                      CALLER_SECRET[0]: CALLER_SECRET[1]}) for run in matrices.runs]
        ended = [proc.communicate(timeout=300) for proc in procs]
    finally:
        done.set()
        watcher.join()
    for run, proc, (_, err) in zip(matrices.runs, procs, ended):
        assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]  # not a crash
        assert not leftovers(run.tag), "processes outlived the run"
    return matrices


@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_is_a_recorded_cell(matrix, name):
    _, status, reason, log = FAULTS[name]
    run = matrix.of(name)
    result = run.result
    found = cells(result, name)
    assert sorted(c["role"] for c in found) == ["base", "candidate"]
    for cell in found:
        assert cell["status"] == status, cell["reason"]
        assert re.search(reason, cell["reason"]), cell["reason"]
        assert re.search(log, cell["log_tail"]), cell["log_tail"][-1500:]
    if name.startswith("null-"):  # a finding keeps the answers that show it
        assert all(cell["samples"] for cell in found), found
    verdict = next(c["verdict"] for c in result["comparisons"] if c["config"] == name)
    assert verdict == ("same" if status == "ok" else "error")  # the same on both sides: never a pass
    launches = run.bench.launches(name)
    if name != "bad-flag":  # argparse exits before the server records anything
        assert len(launches) == LAUNCHES.get(name, 2)
    pids = {p for launch in launches for p in (launch["pid"], launch.get("child")) if p}
    assert not pids & {p.pid for p in tagged(run.tag)}, "a process of this configuration is alive"


def test_no_harness_exception_text_reaches_a_reason(matrix):
    for cell in (cell for run in matrix.runs for cell in run.result["cells"]):
        assert not re.search(r"probe failed|Traceback|NoneType|\(at \w+\.py:\d+\)", cell["reason"]), cell["reason"]


def test_servers_listen_on_loopback_only(matrix):
    ports = {launch["port"] for run in matrix.runs for launch in run.result["launches"]}
    assert {port for _, port in matrix.sockets} & ports, "no server socket was seen during the run"
    assert {ip for ip, _ in matrix.sockets} == {"127.0.0.1"}, matrix.sockets


def test_secrets_never_written(matrix):
    values = [*SECRETS.values(), CALLER_SECRET[1]]
    for run in matrix.runs:
        out = run.bench.out
        written = [p for p in [*out.rglob("*"), *run.cache.rglob("store/**/*")] if p.is_file()]
        assert out / "report.md" in written and any(p.suffix == ".log" for p in written)
        for path in written:
            text = path.read_bytes().decode("utf-8", "replace")
            assert not [v for v in values if v in text], path
    env = cells(matrix.of("healthy").result, "healthy")[0]["metadata"]["server_env"]
    assert {env[k] for k in SECRETS} == {"<redacted>"}


def test_the_suite_timeouts_bound_every_wait(matrix):
    """The suite's timeouts bound the waits: a server never healthy is given up after its 20 s,
    a hung request after its 1 s, not after the defaults (minutes). Read from what the run
    recorded, with room for a loaded machine, never from how long the run took."""
    launches = {name: [l for l in matrix.of(name).result["launches"] if l["config"] == name]
                for name in ("never-healthy", "hang")}
    assert len(launches["never-healthy"]) == 2 and len(launches["hang"]) == 2
    for launch in launches["never-healthy"]:  # waited its 20 s, then gave up
        assert not launch["ok"] and 20.0 <= launch["ended_at"] - launch["started_at"] < 20.0 + 30, launch
    for launch in launches["hang"]:  # up, one request timed out, stopped
        assert launch["ok"] and launch["ended_at"] - launch["started_at"] < 60, launch


def test_no_subprocess_gets_a_shell_string():
    """Every subprocess of the harness gets an argument list; nothing goes through a shell."""
    offenders = []
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in ("os.system", "os.popen") or name.startswith("os.exec") or \
                    any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                        for k in node.keywords) or \
                    (name.startswith("subprocess.") and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not offenders, offenders


def test_a_port_answered_by_another_process_is_not_taken_for_the_server(tmp_path, bare_python,
                                                                        no_leftovers):
    """Someone takes the port while the server loads and answers its health checks: the
    listener is not in the server's process group, so the launch starts over on another port
    instead of measuring the impostor (which answers HTTP 500)."""
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"stolen": ["--fault", "port-stolen", "--fault-launches", "1"]})
    proc = bench.run()
    impostor = psutil.Process(bench.launches("stolen")[0]["impostor"])
    assert impostor.is_running()  # another session's process: not the harness's to stop
    impostor.kill()
    assert proc.returncode == 0, bench.why(proc)
    assert [c["status"] for c in cells(bench.result(), "stolen")] == ["ok", "ok"]
    assert len(bench.launches("stolen")) == 3


# -- interruption and resume ---------------------------------------------------------------

# SIGINT and a hangup unwind as SIGTERM does; resuming is shown once per mode.
@pytest.mark.parametrize("sig, parallel, resume", [
    (signal.SIGTERM, False, True), (signal.SIGINT, False, False), (signal.SIGHUP, False, False),
    (signal.SIGTERM, True, True)], ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGTERM-parallel"])
def test_interrupt_mid_suite_then_resume(tmp_path, bare_python, no_leftovers, sig, parallel, resume):
    bench = Bench(tmp_path, bare_python)
    # "stuck" hangs in its first launch only: interrupted there, it works when resumed.
    bench.write_suite({"done": [], "stuck": ["--fault", "hang-generate", "--fault-launches", "1"]},
                      request_timeout_s=60)
    mode = ("--parallel",) if parallel else ()
    proc = bench.start(*mode)
    bench.wait_launches("stuck", 1)
    while not bench.launches("stuck")[0].get("hung"):
        time.sleep(0.05)
    err = interrupt(proc, sig)
    assert proc.returncode == 130, err[-2000:]
    # the command that continues it gives the servers' interpreter again, as the run recorded it
    assert f"interrupted; servers stopped, finished cells kept; `detcheck run --resume --out {bench.out} --python=" in err
    assert not leftovers(no_leftovers), "a server outlived the interrupted run"
    partial = bench.result()
    assert [c["status"] for c in cells(partial, "done")] == ["ok", "ok"]
    done_launches = len(bench.launches("done"))
    if not resume:
        return
    # The command the interrupt printed, as it is: the run's repo, refs, suite and options come from D.
    resumed = bench.resume()
    assert resumed.returncode == 0, bench.why(resumed)
    result = bench.result()
    assert {c["config"] for c in result["launches"]} == {"stuck"}  # nothing relaunched for "done"
    assert len(bench.launches("done")) == done_launches
    assert {(c["config"], c["status"]) for c in result["cells"]} == {("done", "ok"), ("stuck", "ok")}
    assert [c["verdict"] for c in result["comparisons"]] == ["same", "same"]
    # Both sessions recorded: the first's command (what report.md shows as the command) and launches.
    first, last = result["metadata"]["sessions"]
    assert "--resume" not in first["command"] and "--resume" in last["command"] == result["metadata"]["command"]
    assert first["launches"] == len(partial["launches"]) and last["launches"] == len(result["launches"])


def test_a_hangup_while_servers_start_ends_the_run_at_once_every_time(tmp_path, bare_python, no_leftovers):
    """The cause of `test_interrupt_mid_suite_then_resume[SIGHUP]`'s rare hang: a signal that
    came while a server's start was in flight (or before a relaunch) left that server to its
    thread's health wait, which ran to the suite's startup timeout (test_server.py shows the
    launch's own part deterministically). Signalled at a spread of moments in the servers'
    starts (both roles start at once and never become healthy), the run must end each time long
    before that timeout (600 s), leaving no process behind. Under load it also hung when the
    kernel gave the SIGHUP to a job thread: the main thread, asleep in Future.result, never ran
    the handler (test_signals.py makes that choice deterministic; cli nudges the main thread)."""
    sig = signal.SIGHUP
    for attempt in range(6):
        bench = Bench(tmp_path / f"attempt-{attempt}", bare_python)
        bench.write_suite({"loading": ["--fault", "never-healthy"]}, startup_timeout_s=600)
        proc = bench.start("--slots", "2")
        bench.wait_launches("loading", 1, timeout_s=120)
        time.sleep(attempt * 0.03)  # from the first server's start to well into both health waits
        err = interrupt(proc, sig, timeout=120)
        assert proc.returncode == 130, f"attempt {attempt}: {err[-2000:]}"
        assert not leftovers(no_leftovers), f"attempt {attempt}: a server outlived the interrupted run"


def test_resume_refuses_another_comparison_and_leaves_the_run_as_it_was(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    assert bench.run().returncode == 0
    before = (bench.out / "results.json").read_bytes()
    # Given with --resume, the candidate ref at another sha: the run in --out compared main.
    refused = bench.resume("--candidate", "main~1")
    assert refused.returncode == 2, bench.why(refused)
    assert "--resume: --candidate main~1" in refused.stderr and "leave --candidate out" in refused.stderr
    assert (bench.out / "results.json").read_bytes() == before
    assert len(bench.launches("one")) == 2  # the first run's two servers: the refused resume launched none


def test_nohup_run_survives_a_hangup(tmp_path, bare_python, no_leftovers):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"slow": ["--fault", "hang-generate"]}, request_timeout_s=1)  # the hang: a cell after 1 s
    proc = bench.start(command=("nohup",))
    bench.wait_launches("slow", 1)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "interrupted" not in err, err[-2000:]  # the hang is a cell
    assert len(bench.launches("slow")) == 2


def test_second_interrupt_kills_a_server_that_ignores_sigterm(tmp_path, bare_python, no_leftovers):
    """Ctrl-C twice while a server sits out its SIGTERM grace: it is killed, not left running."""
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"stubborn": ["--fault", "hang-generate", "--fault", "ignore-sigterm",
                                    "--spawn-child"]}, request_timeout_s=60)
    # A grace far longer than anything the test allows: a harness that waited it out could not
    # pass on any machine, and one that cuts it short passes however busy the machine is.
    proc = bench.start(env={"DETCHECK_STOP_GRACE_S": "600"})
    bench.wait_launches("stubborn", 1)
    while not bench.launches("stubborn")[0].get("hung"):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)  # the harness now waits out the server's grace period
    assert proc.poll() is None
    t0 = time.monotonic()
    err = interrupt(proc, signal.SIGINT, timeout=300)  # past it: TimeoutExpired, the grace was waited out
    assert time.monotonic() - t0 < 300, "the second interrupt did not cut the grace period short"
    assert proc.returncode == 130, err[-2000:]
    assert not leftovers(no_leftovers, wait_s=1.0)


# -- the results store and results files --------------------------------------------------

@pytest.fixture(scope="module")
def stored(tmp_path_factory, bare_python):
    """A finished run whose cells are in its own store."""
    bench = Bench(tmp_path_factory.mktemp("stored"), bare_python)
    bench.write_suite({"only": []})
    store, tag = bench.root / "store", uuid.uuid4().hex
    proc = detcheck(*bench.args("--store", str(store)), env={
        **bench.env(), TAG: tag, "DETCHECK_CACHE_DIR": str(bench.root / "cache")})
    assert proc.returncode == 0, bench.why(proc)
    assert not leftovers(tag), "processes outlived the run"
    return bench, store


def _truncate(text: str) -> str:
    return text[: len(text) // 2]


def _edit_value(text: str) -> str:
    data = json.loads(text)
    data["metrics"][0]["values"][0] += 1.0
    return json.dumps(data)


def _other_schema(text: str) -> str:
    return json.dumps({**json.loads(text), "schema": 99})


@pytest.mark.parametrize("edit, message", [
    (_truncate, r"corrupt cell file \(.* at line \d+\)"),
    (_edit_value, r"content does not match its digest"),
    (_other_schema, r"schema 99, expected \d+"),
], ids=["truncated", "hand-edited", "other-schema"])
def test_damaged_store_cell_is_reported_with_its_path(stored, tmp_path, no_leftovers, edit, message):
    bench, store = stored
    copy = shutil.copytree(store, tmp_path / "store")
    victim = sorted(copy.rglob("*.json"))[0]
    victim.write_text(edit(victim.read_text()))
    out = tmp_path / "out"
    launched = len(bench.launches("only"))
    proc = detcheck(*bench.args("--store", str(copy), "--out", str(out)), env=bench.env())
    assert proc.returncode == 2, bench.why(proc)
    assert f"corrupt result: {victim}: " in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr
    assert len(bench.launches("only")) == launched and not (out / "logs").exists()


@pytest.mark.parametrize("edit, command, message", [
    (_truncate, "report", r"corrupt results file \(.* at line \d+\)"),
    (_other_schema, "compare", r"schema 99, expected \d+"),
], ids=["truncated", "other-schema"])
def test_damaged_results_file_is_reported_with_its_path(stored, tmp_path, edit, command, message):
    bench, _ = stored
    results = tmp_path / "results.json"
    results.write_text(edit((bench.out / "results.json").read_text()))
    args = {"report": [str(results)],
            "compare": ["--base-results", str(bench.out), "--candidate-results", str(results)]}[command]
    proc = detcheck(command, *args)
    assert proc.returncode == 2, bench.why(proc)
    assert f"corrupt result: {results}: " in proc.stderr and re.search(message, proc.stderr)


def test_one_token_repeated_and_spec_keys_left_out_are_said_not_crashed(tmp_path, bare_python):
    """Two answers SGLang gives that a harness must not trip on: outputs that are one token
    repeated (0.5.17's unified pool on some prompts) are flagged in the row with the outputs kept;
    spec_* keys present on some answers only (SGLang omits them for a request without a verify
    round) count as no verify round, with no harness exception anywhere."""
    bench = Bench(tmp_path, bare_python)
    bench.suite.write_text("\n".join([
        'name = "answers"', "[models]", f'sglang = "{ROOT / "fixtures/refmodels/hybrid"}"',
        "[server]", "startup_timeout_s = 60", "request_timeout_s = 60",
        # 6 prompts: the fewest whose accept-length pairs can reach alpha (the design check).
        "[workload]", "prompts = 6", "prompt_len = [8, 12]", "output_len = 12",
        "[[config]]", 'name = "repeat-token"', "deterministic = true", 'probes = ["kl"]',
        f'args = ["--fault", "repeat-token", "--state", "{bench.state / "repeat"}"]',
        "[[config]]", 'name = "spec-keys-some"', 'probes = ["accept_length"]',
        'speculative = { algorithm = "EAGLE", num_steps = 2, eagle_topk = 1, num_draft_tokens = 3 }',
        f'args = ["--fault", "spec-keys-some", "--state", "{bench.state / "spec"}"]',
        "[config.draft]", f'sglang = "{ROOT / "fixtures/refmodels/hybrid"}"',
        # The fault server keeps no prefix cache: turn 2 is measured without a hit.
        "[probe.accept_length]", "min_hit_fraction = 0.0", ""]))
    proc = bench.run()
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    result = bench.result()
    for cell in result["cells"]:
        assert cell["status"] == "ok", cell["reason"]
    for cell in cells(result, "repeat-token"):
        assert cell["facts"]["degenerate_prompts"] == 6
        assert all(set(s["output_ids"]) == {0} for s in cell["samples"])
    for cell in cells(result, "spec-keys-some"):
        verify = [s["spec_verify_ct"] for s in cell["samples"]]
        assert verify[0] > 0 and 0 in verify, verify  # the answers without spec_* count 0 rounds
    report = (bench.out / "report.md").read_text() if (bench.out / "report.md").exists() else proc.stdout
    assert "6/6 outputs one token repeated" in report
