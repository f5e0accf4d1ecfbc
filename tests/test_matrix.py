"""matrix.toml loading and validation, the GPU split per role, and the nox sessions built from it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, detcheck, fake_gpus
from harness.errors import UsageError
from harness.fixture_repo import FixtureRepo
from harness.matrix import MatrixEntry, load_matrix

GOOD = """
[[entry]]
name = "h200x2"
gpu = "H200"
gpus = 2
suites = ["{suite}"]
server_args = ["--mem-fraction-static", "0.3"]
env = {{ NCCL_NVLS_ENABLE = "0" }}
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "default.toml").write_text("")
    path = tmp_path / "matrix.toml"
    path.write_text(text.format(suite="default.toml"))
    return path


def test_the_project_matrix_loads():
    matrix = load_matrix(ROOT / "matrix.toml")
    names = [e.name for e in matrix.entries]
    assert "refserver-cpu" in names and "h200x1" in names and "h200x2" in names
    assert all(s.is_file() for e in matrix.entries for s in e.suites)


def test_entry_fields(tmp_path):
    entry = load_matrix(write(tmp_path, GOOD)).entry("h200x2")
    assert (entry.gpu, entry.gpus, entry.target, entry.parallel) == ("H200", 2, None, True)  # None: the checkout's
    assert entry.server_args == ("--mem-fraction-static", "0.3")
    assert entry.env == {"NCCL_NVLS_ENABLE": "0"}
    assert entry.suites == ((tmp_path / "default.toml").resolve(),)
    assert (entry.order_from, entry.first_per_model) == ((), False)


def test_an_entrys_start_order_fields_resolve_from_the_matrix_file(tmp_path):
    (tmp_path / "earlier").mkdir()
    path = write(tmp_path, GOOD + 'order_from = ["earlier"]\nfirst_per_model = true\n')
    entry = load_matrix(path).entry("h200x2")
    assert entry.order_from == ((tmp_path / "earlier").resolve(),) and entry.first_per_model


@pytest.mark.parametrize("text, field", [
    ("[[entry]]\nname = 'a b'\nsuites = ['{suite}']", "[[entry]] #1.name"),
    ("[[entry]]\nname = 'x'\ngpus = -1\nsuites = ['{suite}']", "'x'.gpus"),
    ("[[entry]]\nname = 'x'\ngpus = 2\nsuites = ['{suite}']", "'x'.gpu"),
    ("[[entry]]\nname = 'x'\ntarget = 'vllm'\nsuites = ['{suite}']", "'x'.target"),
    ("[[entry]]\nname = 'x'\nsuites = []", "'x'.suites"),
    ("[[entry]]\nname = 'x'\nsuites = ['missing.toml']", "'x'.suites: 'missing.toml' not found"),
    ("[[entry]]\nname = 'x'\nsuites = ['{suite}']\nenv = 3", "'x'.env"),
    ("[[entry]]\nname = 'x'\nsuites = ['{suite}']\nserver_args = '--a'", "'x'.server_args"),
    ("[[entry]]\nname = 'x'\nsuites = ['{suite}']\ngpu_count = 1", "unknown key 'gpu_count' (known: "),
    ("[[entry]]\nname = 'x'\ngpu = 'H200'\ngpus = 1\nservers_per_gpu = 0\nsuites = ['{suite}']",
     "'x'.servers_per_gpu: must be an integer from 1 to 64"),
    ("[[entry]]\nname = 'x'\nservers_per_gpu = 2\nsuites = ['{suite}']", "on an entry with gpus >= 1"),
    ("[[entry]]\nname = 'x'\nsuites = ['{suite}']\n[[entry]]\nname = 'x'\nsuites = ['{suite}']",
     "[[entry]] #2.name: duplicate name 'x' (also [[entry]] #1)"),
    ("[[entry]]\nname = 'x'\nsuites = ['{suite}']\norder_from = ['no-such-run']", "'x'.order_from: "),
    ("[[entry]]\nname = 'x'\nsuites = ['{suite}']\nfirst_per_model = 'yes'", "'x'.first_per_model: must be true"),
    ("entries = 1", "unknown key 'entries'; did you mean 'entry'?"),
    ("", "needs at least one [[entry]]"),
    ("[[entry]\n", "not valid TOML"),
])
def test_errors_name_the_file_and_field(tmp_path, text, field):
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as err:
        load_matrix(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_missing_file():
    with pytest.raises(UsageError, match="matrix file not found"):
        load_matrix("/nonexistent/matrix.toml")


def entry(gpus: int, gpu: str = "H200") -> MatrixEntry:
    return MatrixEntry(name="e", gpu=gpu, gpus=gpus, suites=())


def test_gpus_fall_into_groups_as_wide_as_one_server():
    assert entry(2).device_groups(1) == ["0", "1"]
    assert entry(4).device_groups(2, "4,5,6,7") == ["4,5", "6,7"]
    assert entry(4).device_groups(4) == ["0,1,2,3"]
    assert entry(5).device_groups(2) == ["0,1", "2,3"]  # the fifth GPU holds no whole server
    with pytest.raises(UsageError, match="a server spans 8 GPUs and the entry has 2"):
        entry(2).device_groups(8)
    assert not entry(1).parallel and entry(2).parallel
    assert not MatrixEntry(name="e", gpu="H200", gpus=2, suites=(), gpus_per_server=2).parallel


def test_gpus_per_server_is_read_from_the_parallelism_flags():
    from harness.configs import gpus_per_server
    assert gpus_per_server(()) == 1
    assert gpus_per_server(("--tp-size", "2")) == 2
    assert gpus_per_server(("--tp=4", "--pp-size", "2")) == 8
    assert gpus_per_server(("--tp", "2", "--dp-size", "2")) == 4  # DP replicas of TP=2 servers
    assert gpus_per_server(("--tp", "4", "--dp", "4", "--enable-dp-attention")) == 4  # DP inside TP
    assert gpus_per_server(("--tp-size", "8", "--attn-cp-size", "8")) == 8  # CP inside the TP group
    assert gpus_per_server(("--tp-size", "2", "--ep-size", "2")) == 2
    assert gpus_per_server(("--tp-size", "16", "--nnodes", "2")) == 8  # on each of two machines
    for bad in (("--tp-size", "0"), ("--tp-size", "two"), ("--tp", "3", "--nnodes", "2")):
        with pytest.raises(UsageError, match="cfg"):
            gpus_per_server(bad, "cfg")


def test_a_declared_gpus_per_server_is_checked(tmp_path):
    entry = load_matrix(write(tmp_path, GOOD + "gpus_per_server = 2\n")).entry("h200x2")
    assert entry.gpus_per_server == 2
    with pytest.raises(UsageError, match="gpus_per_server: must be an integer from 1 to gpus"):
        load_matrix(write(tmp_path, GOOD + "gpus_per_server = 3\n"))


def test_why_a_machine_cannot_run_an_entry():
    assert entry(0, "").missing(None) is None
    assert "no nvidia-smi" in entry(1).missing(None)
    assert "has 1" in entry(2).missing(["NVIDIA H200"])
    assert "has 0" in entry(1).missing(["NVIDIA A100-SXM4-80GB"])
    assert entry(2).missing(["NVIDIA H200", "NVIDIA H200"]) is None


def nox(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def matrix_listing() -> subprocess.CompletedProcess:
    """`nox -l --json -t matrix`, once for the tests that only read it (a nox process reads every
    entry's stored runs for its est_time)."""
    return nox("-l", "--json", "-t", "matrix")


def test_nox_lists_one_validate_session_per_entry(matrix_listing):
    proc = matrix_listing
    assert proc.returncode == 0, proc.stderr
    sessions = json.loads(proc.stdout)
    names = [e.name for e in load_matrix(ROOT / "matrix.toml").entries]
    assert [s["session"] for s in sessions] == [f"validate({n})" for n in names]
    assert all(s["call_spec"]["entry"] in names and "matrix" in s["tags"] for s in sessions)
    listing = nox("-l", "--json")  # a bare `nox` runs these, and never the validate sessions
    default = {s["session"] for s in json.loads(listing.stdout)}
    assert {"tests", "lint"} <= default and not any(s.startswith("validate") for s in default)


def test_nox_skips_an_entry_whose_gpus_are_not_here():
    proc = nox("-s", "validate(h200x2)", "--", "--repo", ".", "--base", "HEAD", "--candidate", "HEAD",
               env={"PATH": os.path.dirname(sys.executable)})  # no nvidia-smi on this PATH
    assert proc.returncode == 0, proc.stderr
    assert "Session validate(h200x2) skipped: needs 2× H200; this machine has no nvidia-smi" in proc.stderr


def test_nox_validate_without_revisions_is_an_error():
    proc = nox("-s", "validate(refserver-cpu)")
    assert proc.returncode != 0 and "which revisions?" in proc.stderr


@pytest.mark.slow
def test_nox_validate_runs_the_cpu_entry(tmp_path):
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    cand = repo.note("a harmless change")
    proc = nox("-s", "validate(refserver-cpu)", "--", "--repo", str(repo.path), "--base", base,
               "--candidate", cand, "--out", str(tmp_path / "out"), "--format", "md",
               env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "**Verdict: same (4 same); cells: 8 measured" in proc.stdout
    assert (tmp_path / "out" / "default" / "results.json").is_file()


def test_matrix_list_json():
    proc = detcheck("matrix", "list", "--json")
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["refserver-cpu"]["runnable_here"] is True
    assert rows["h200x2"]["parallel"] is True


@pytest.mark.slow
def test_an_entry_with_two_gpus_runs_both_roles_at_once(tmp_path):
    """The pipeline's parallel path on CPU: each role gets its own CUDA_VISIBLE_DEVICES."""
    (tmp_path / "matrix.toml").write_text(
        f'[[entry]]\nname = "cpu-pair"\ngpu = "cpu"\ngpus = 2\ntarget = "refserver"\n'
        f'suites = ["{ROOT / "suites" / "default.toml"}"]\nenv = {{ DETCHECK_TEST_ENV = "1" }}\n')
    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    repo.edit("cache")
    cand = repo.commit("planted regression: cache")
    proc = detcheck("matrix", "run", "cpu-pair", "--matrix", str(tmp_path / "matrix.toml"),
                    "--repo", str(repo.path), "--base", base, "--candidate", cand,
                    "--out", str(tmp_path / "out"), "--format", "json",
                    env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache"), **fake_gpus(tmp_path / "bin", ["cpu", "cpu"])})
    assert proc.returncode == 1, proc.stderr  # the planted regression differs
    assert "base on GPU 0, candidate on GPU 1, at the same time" in proc.stderr
    assert f"matrix cpu-pair: results and reports in {tmp_path / 'out'}/ (default/)" in proc.stderr
    result = json.loads(proc.stdout)
    assert {c["probe"]: c["verdict"] for c in result["comparisons"]} == {
        "kl": "same", "prefill_cache_hit": "different", "decode_cache_hit": "different", "revision_kl": "same"}
    envs = {c["role"]: c["metadata"]["server_env"] for c in result["cells"]}
    assert envs["base"]["CUDA_VISIBLE_DEVICES"] == "0" and envs["candidate"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert envs["base"]["DETCHECK_TEST_ENV"] == "1"
    assert len(result["launches"]) == 2


def test_the_ci_example_turns_nox_sessions_into_one_job_per_entry(matrix_listing):
    rows = _github_matrix().rows(json.loads(matrix_listing.stdout))
    assert {r["entry"] for r in rows} == {e.name for e in load_matrix(ROOT / "matrix.toml").entries}
    assert {r["entry"]: r["runner"] for r in rows}["refserver-cpu"] == "ubuntu-latest"


# -- entries as CI jobs (issue 36): runner labels, est_time, partitions ------------------------

def test_runner_labels_are_declared_or_sglangs_form(tmp_path):
    assert entry(2).runner_label == "2-gpu-h200" and entry(8, "H100 80GB").runner_label == "8-gpu-h100-80gb"
    assert entry(0, "").runner_label == "cpu"
    assert MatrixEntry(name="e", gpu="", gpus=2, suites=(), target="refserver").runner_label == "cpu"  # modelled
    declared = load_matrix(write(tmp_path, GOOD + 'runner = "2-gpu-h100"\n')).entry("h200x2")
    assert declared.runner_label == "2-gpu-h100"
    for bad, message in (('runner = "a b"', "runner: must be a runner label"),
                         ("est_time = -1", "est_time: must be seconds"), ("partitions = 0", "partitions: must be")):
        with pytest.raises(UsageError, match=message):
            load_matrix(write(tmp_path, GOOD + bad + "\n"))


def test_est_time_is_the_stored_runs_wall_time():
    """h200x1's order_from is the pool run of its three suites: their servers' windows, once."""
    h200 = load_matrix(ROOT / "matrix.toml").entry("h200x1")
    assert 400 < h200.estimate() < 450  # results/h200/pool-order: 425 s, launch to last teardown
    pools, speculative, inkling = h200.suite_estimates()
    assert all(300 < t <= h200.estimate() for t in (pools, speculative, inkling))
    assert load_matrix(ROOT / "matrix.toml").entry("refserver-cpu").estimate() is None  # never timed


def test_union_of_windows_and_longest_processing_time_partitions():
    from harness.estimates import filled, lpt_partition, union_seconds
    assert union_seconds([(0, 10), (5, 20), (30, 40)]) == 30
    assert union_seconds([]) == 0
    assert lpt_partition(["a", "b", "c", "d", "e"], [7, 5, 4, 3, 3], 2) == [["a", "d"], ["b", "c", "e"]]  # 10, 12
    assert lpt_partition(["a", "b"], [1, 2], 5) == [["b"], ["a"]]  # no empty jobs
    assert filled([None, 10, 20]) == [15, 10, 20] and filled([None]) == [600.0]


def test_an_entrys_suites_split_into_partitions_by_est_time(tmp_path):
    for name in ("long", "mid", "short"):
        (tmp_path / f"{name}.toml").write_text("")
    path = tmp_path / "matrix.toml"
    path.write_text('[[entry]]\nname = "split"\ngpu = "H200"\ngpus = 1\nest_time = 90\npartitions = 2\n'
                    'suites = ["long.toml", "mid.toml", "short.toml"]\n')
    split = load_matrix(path).entry("split")
    assert [job for job, _, _ in split.jobs()] == ["split-1of2", "split-2of2"]
    assert [len(split.partition(k)) for k in (1, 2)] == [2, 1]
    assert sorted(s.stem for k in (1, 2) for s in split.partition(k)) == ["long", "mid", "short"]
    with pytest.raises(UsageError, match="--partition 3: it has 2"):
        split.partition(3)


def test_nox_lists_each_jobs_runner_and_est_time(matrix_listing):
    sessions = {s["session"]: s for s in json.loads(matrix_listing.stdout)}
    h200 = sessions["validate(h200x1)"]["call_spec"]
    assert (h200["runner"], h200["partition"]) == ("1-gpu-h200", 0) and 400 < h200["est_time"] < 450
    assert "runner:1-gpu-h200" in sessions["validate(h200x1)"]["tags"]
    assert sessions["validate(refserver-cpu)"]["call_spec"]["runner"] == "cpu"


def _github_matrix():
    spec = importlib.util.spec_from_file_location("github_matrix", ROOT / "ci" / "github_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ci_example_packs_a_labels_jobs_longest_processing_time_first():
    def session(job: str, label: str, est: float | None) -> dict:
        return {"session": f"validate({job})", "tags": ["matrix", "gpu"],
                "call_spec": {"entry": job.split("-")[0], "partition": 0, "runner": label, "est_time": est}}

    sessions = [session("a", "8-gpu-h200", 300), session("b", "8-gpu-h200", 200), session("c", "8-gpu-h200", 150),
                session("d", "8-gpu-h200", 100), session("e", "1-gpu-h100", None)]
    packed = _github_matrix().rows(sessions, {"8-gpu-h200": 2})
    assert [(r["jobs"], r["est_time"]) for r in packed] == [(["a", "d"], 400), (["b", "c"], 350), (["e"], None)]
    assert packed[0]["runner"] == ["self-hosted", "8-gpu-h200"]
    assert [r["jobs"] for r in _github_matrix().rows(sessions)] == [["a"], ["b"], ["c"], ["d"], ["e"]]
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "github_matrix.py"), "--jobs", "8-gpu-h200=1"],
                          input=json.dumps(sessions), capture_output=True, text=True, check=True)
    rows = json.loads(proc.stdout.removeprefix("matrix="))["include"]
    assert rows[0]["jobs"] == ["a", "b", "c", "d"] and rows[0]["est_time"] == 750


def test_the_log_counts_server_slots_in_words():
    from harness.commands.matrix import placement
    from harness.pipeline.slots import Slot

    assert placement((Slot(),)) == " (1 server slot)"
    assert placement((Slot({"CUDA_VISIBLE_DEVICES": "0"}), Slot({"CUDA_VISIBLE_DEVICES": "0"}))) == \
        " (2 server slots on GPU 0)"


def test_an_entrys_python_is_its_servers_interpreter_and_matrix_run_checks_it(tmp_path):
    """A GPU runner's SGLang environment, named once in matrix.toml (a path from the matrix file,
    `~` the runner's home; a bare name from PATH), or by `matrix run --python` / nox's validate
    (`-- --python`), which wins. One that is not there is bad input before anything starts."""
    relative = load_matrix(write(tmp_path, GOOD + 'python = "envs/sglang/bin/python"\n')).entry("h200x2")
    assert relative.python == str(tmp_path / "envs/sglang/bin/python")
    assert load_matrix(write(tmp_path, GOOD + 'python = "python3"\n')).entry("h200x2").python == "python3"
    assert load_matrix(write(tmp_path, GOOD)).entry("h200x2").python is None
    cpu = tmp_path / "cpu.toml"
    cpu.write_text(f'[[entry]]\nname = "cpu"\ngpus = 0\ntarget = "refserver"\nsuites = ["{ROOT}/suites/default.toml"]\n'
                   'python = "/nowhere/bin/python"\n')
    repo = FixtureRepo.create(tmp_path / "repo")
    argv = ("matrix", "run", "cpu", "--matrix", str(cpu), "--repo", str(repo.path), "--base", repo.head(),
            "--candidate", repo.head(), "--out", str(tmp_path / "out"))
    proc = detcheck(*argv)
    assert (proc.returncode, proc.stderr.splitlines()[-1]) == (
        2, "detcheck: error: cpu.python /nowhere/bin/python: no such executable")
    proc = detcheck(*argv, "--python", "/also/nowhere")
    assert proc.stderr.splitlines()[-1] == "detcheck: error: --python /also/nowhere: no such executable"
