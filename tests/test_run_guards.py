"""A verdict is a promise: end-to-end runs (real processes, fault servers, real git repos) that
try to make detcheck pass vacuously, trust a result of another revision, leak a secret, lose
work when the harness dies, or trip over a bad machine."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, detcheck_argv, leftovers, make_sglang_repo
from faultlib import Bench, cells, suite_text

pytestmark = pytest.mark.slow


def test_every_configuration_na_is_nothing_measured_not_a_pass(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": [], "two": []})
    proc = bench.run("--server-arg=--random-sed=5")  # a typo the revision's --help does not know
    assert proc.returncode == 3, bench.why(proc)
    result = bench.result()
    assert {c["status"] for c in result["cells"]} == {"n/a"}
    assert not result["launches"]
    md = (bench.out / "report.md").read_text()
    assert "nothing measured" in md and "0 measured, 4 n/a, 0 error" in md


def test_an_empty_help_cache_file_is_read_again_not_taken_for_a_revision_without_flags(
        tmp_path, bare_python, isolated_cache):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    for ref in ("main~1", "main"):
        sha = subprocess.run(["git", "-C", str(bench.repo), "rev-parse", ref], capture_output=True,
                             text=True, check=True).stdout.strip()
        cache = isolated_cache / "help" / f"sglang-{sha}.txt"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text("")  # what a crash on a full disk leaves behind
    proc = bench.run()
    assert proc.returncode == 0, bench.why(proc)
    assert {c["status"] for c in bench.result()["cells"]} == {"ok"}
    assert len(bench.result()["launches"]) == 2


def test_a_cell_copied_under_another_revision_is_measured_again(tmp_path, bare_python, isolated_cache):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    assert bench.run().returncode == 0
    first = bench.result()
    base_sha, cand_sha = first["base"]["sha"], first["candidate"]["sha"]
    store = isolated_cache / "store" / "sglang"
    base_dir, cand_dir = store / base_sha[:12], store / cand_sha[:12]
    # Transplant: the base's cell file takes the candidate's place.
    for cell in cand_dir.rglob("*.json"):
        shutil.copy(base_dir / cell.relative_to(cand_dir), cell)
    proc = bench.run("--force")
    assert proc.returncode == 0, bench.why(proc)
    assert "recorded under another key" in proc.stderr and "measuring it again" in proc.stderr
    second = bench.result()
    assert [(l["role"], l["sha"]) for l in second["launches"]] == [("candidate", cand_sha)]
    cand_cell = next(c for c in second["cells"] if c["role"] == "candidate")
    assert cand_cell["revision"]["sha"] == cand_sha and cand_cell["key"]["sha"] == cand_sha


def test_two_configurations_with_identical_settings_each_get_their_cells(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    text = suite_text({"a": []}, bench.state)
    block = text[text.index("[[config]]"):]
    bench.suite.write_text(text + block.replace('name = "a"', 'name = "b"'))  # same args, env, model
    proc = bench.run()
    assert proc.returncode == 0, bench.why(proc)
    assert [c["verdict"] for c in bench.result()["comparisons"]] == ["same", "same"]


def test_an_out_holding_another_run_is_refused_unless_resume_or_force(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    assert bench.run().returncode == 0
    again = bench.run()
    assert again.returncode == 2 and "holds an earlier run" in again.stderr
    forced = bench.run("--force", "--fresh")
    assert forced.returncode == 0, bench.why(forced)
    logs = list((bench.out / "logs").iterdir())
    assert len(logs) == 2
    for log in logs:  # replaced, not appended to: one launch per log
        assert log.read_text().count("server_args=") == 1, log


def test_a_secret_flag_is_absent_from_every_file_written(tmp_path, bare_python, isolated_cache):
    """The server echoes its argv into its log; the key must not survive anywhere."""
    secret = "sk-live-" + os.urandom(8).hex()
    repo = make_sglang_repo(tmp_path, module="faults")
    (repo / "python" / "sglang" / "launch_server.py").write_text(
        "import runpy, sys\n"
        "argv = sys.argv[1:]\n"
        "print('launch argv:', ' '.join(argv), flush=True)\n"
        "if '--help' in argv:\n"
        "    print('  --api-key API_KEY   the key clients must send')\n"
        "if '--api-key' in argv:\n"
        "    i = argv.index('--api-key'); del argv[i:i + 2]\n"
        "sys.argv = ['sglang.launch_server', *argv]\n"
        "runpy.run_module('faults', run_name='__main__')\n")
    for message in ("echo argv", "candidate"):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                        "-q", "--allow-empty", "-am", message], check=True)
    bench = Bench(tmp_path, bare_python, repo=repo)
    bench.write_suite({"one": ["--fault", "http-500"]})  # a failing cell keeps a log tail too
    proc = bench.run("--server-arg=--api-key", f"--server-arg={secret}")
    assert proc.returncode == 1, bench.why(proc)
    assert "launch argv:" in "".join(p.read_text() for p in (bench.out / "logs").iterdir())
    for root in (bench.out, isolated_cache):
        for path in root.rglob("*"):
            if path.is_file():
                assert secret not in path.read_bytes().decode("utf-8", "replace"), path
    assert secret not in proc.stdout + proc.stderr


def test_kill_9_of_detcheck_leaves_no_server_and_resume_finishes(tmp_path, bare_python, no_leftovers):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"stuck": ["--fault", "hang-generate", "--fault-launches", "1"]},
                      request_timeout_s=60)
    proc = bench.start()
    bench.wait_launches("stuck", 1)
    while not bench.launches("stuck")[0].get("hung"):
        time.sleep(0.05)
    proc.kill()
    proc.communicate(timeout=30)
    assert not leftovers(no_leftovers, wait_s=2.0), "a server outlived `kill -9` of detcheck"
    resumed = bench.run("--resume")
    assert resumed.returncode == 0, bench.why(resumed)
    assert [c["status"] for c in cells(bench.result(), "stuck")] == ["ok", "ok"]


def test_a_server_left_by_a_dead_run_is_reaped_by_the_next(tmp_path, isolated_cache, no_leftovers):
    """The registry path: a record whose harness is gone gets its server's group killed, after
    the start time and the marker in its environment proved the pid is still that server."""
    from harness.lifeline import SERVER_MARKER, reap_orphans
    server = subprocess.Popen(["sleep", "300"], start_new_session=True,
                              env={**os.environ, SERVER_MARKER: "token-of-this-server"})
    dead_harness = subprocess.Popen(["true"])
    dead_harness.wait()
    import psutil
    record = isolated_cache / "servers" / f"{dead_harness.pid}-{server.pid}.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"harness_pid": dead_harness.pid, "harness_started": 1.0,
                                  "server_pid": server.pid,
                                  "server_started": psutil.Process(server.pid).create_time(),
                                  "token": "token-of-this-server"}))
    assert reap_orphans() == [server.pid]
    assert server.wait(timeout=5) == -signal.SIGKILL
    assert not record.exists()


def test_eight_concurrent_runs_on_one_cache_all_succeed(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    # Sixteen servers start at once on a small machine: time enough to become healthy.
    bench.write_suite({"one": []}, startup_timeout_s=120, request_timeout_s=60)
    procs = []
    for i in range(8):
        args = bench.args()
        args[args.index("--out") + 1] = str(tmp_path / f"out-{i}")
        procs.append(subprocess.Popen(detcheck_argv(*args), cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env={**os.environ, **bench.env()}))
    for i, proc in enumerate(procs):
        _, err = proc.communicate(timeout=300)
        result = json.loads((tmp_path / f"out-{i}" / "results.json").read_text())
        reasons = [c["reason"] for c in result["cells"] if c["reason"]]
        assert proc.returncode == 0, f"run {i}: {reasons} {err[-2000:]}"
        assert [c["verdict"] for c in result["comparisons"]] == ["same"]


def test_a_relative_cache_dir_is_made_absolute_and_refused_inside_the_repo(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    env = {**bench.env(), "DETCHECK_CACHE_DIR": "cache-here"}
    inside = subprocess.run(detcheck_argv(*bench.args()), cwd=bench.repo, capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=120)
    assert inside.returncode == 2 and "inside the repository under test" in inside.stderr
    assert not (bench.repo / "cache-here" / "worktrees").exists()


def test_dirty_repo_warns_what_is_tested(tmp_path, bare_python):
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    (bench.repo / "python" / "sglang" / "__init__.py").write_text("__version__ = 'edited'\n")
    proc = bench.run()
    assert proc.returncode == 0, bench.why(proc)
    assert "uncommitted changes (1 tracked file changed)" in proc.stderr
    assert "committed revisions are tested" in proc.stderr


def stored_demo_run(tmp_path: Path) -> Path:
    """A run directory holding the checked-in demo run's results.json."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text((ROOT / "tests" / "data" / "demo-cache.json").read_text())
    return run_dir


def test_disk_full_is_a_clean_exit_naming_the_path(tmp_path, monkeypatch, capsys):
    """ENOSPC injected into the one function every result file goes through."""
    from harness import cli, result_files

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(result_files, "atomic_write_text", full)
    run_dir = stored_demo_run(tmp_path)
    code = cli.main(["baseline", "populate", "--results", str(run_dir), "--out", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 4 and "No space left on device" in err and "b.json" in err and "Traceback" not in err


def test_report_on_a_read_only_run_directory_still_prints(tmp_path, monkeypatch, capsys):
    """EACCES injected where report.md is written (a chmod would not stop root, as in CI)."""
    from harness import cli
    from harness.report import emit

    def read_only(path, text):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(emit, "atomic_write_text", read_only)
    run_dir = stored_demo_run(tmp_path)
    assert cli.main(["report", str(run_dir), "--format", "md"]) == 0
    out, err = capsys.readouterr()
    assert "Verdict" in out and "report.md and plots not written" in err


def test_a_help_that_hangs_fails_only_its_revision_within_the_startup_timeout(tmp_path, bare_python):
    repo = make_sglang_repo(tmp_path, module="faults")
    shim = repo / "python" / "sglang" / "launch_server.py"
    shim.write_text("import sys, time\nif '--help' in sys.argv: time.sleep(600)\n" + shim.read_text())
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                    "-qam", "help hangs"], check=True)
    bench = Bench(tmp_path, bare_python, repo=repo)
    bench.write_suite({"one": []}, startup_timeout_s=3)
    t0 = time.monotonic()
    proc = bench.run("--base", "main~2", timeout=500)
    assert time.monotonic() - t0 < 400  # the hang waited out would take 600 s; a busy machine is slow, not that slow
    assert proc.returncode == 1, bench.why(proc)
    by_role = {c["role"]: c for c in bench.result()["cells"]}
    assert by_role["base"]["status"] == "ok"
    assert by_role["candidate"]["status"] == "error" and "did not finish within 3 s" in by_role["candidate"]["log_tail"]


def test_each_revision_runs_from_its_own_interpreter_and_results_say_which(tmp_path, bare_python):
    """A revision that needs other packages: the candidate's servers run under an interpreter
    with torch, the base's under one without, and each cell records its own."""
    bench = Bench(tmp_path, bare_python)
    bench.write_suite({"one": []})
    proc = bench.run("--candidate-python", sys.executable)
    assert proc.returncode == 0, bench.why(proc)
    by_role = {c["role"]: c for c in bench.result()["cells"]}
    assert by_role["base"]["metadata"]["python"] == bare_python
    assert by_role["candidate"]["metadata"]["python"] == sys.executable
    assert "torch" not in by_role["base"]["metadata"] and "torch" in by_role["candidate"]["metadata"]
    assert by_role["base"]["key"]["interpreter"] != by_role["candidate"]["key"]["interpreter"]
