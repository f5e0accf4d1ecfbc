"""The runner fingerprint of each launch (harness/runner.py): nvidia-smi absent is recorded as
absent; present, each GPU's memory, the driver and the compute processes that are not this
harness's servers (told apart by the server token in their environment)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.lifeline import SERVER_MARKER
from harness.runner import runner_fingerprint


def sleeper(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, **env})


def test_without_nvidia_smi_the_fingerprint_says_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runner_fingerprint() == {"nvidia_smi": "absent"}


def test_foreign_compute_processes_and_free_memory_per_gpu_are_recorded(tmp_path, monkeypatch):
    ours = sleeper({SERVER_MARKER: f"{os.getpid()}-token"})
    theirs = sleeper({})
    try:
        smi = tmp_path / "nvidia-smi"
        smi.write_text(f"""#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, GPU-a, 1024, 143771, 570.86"; echo "1, GPU-b, 140000, 143771, 570.86" ;;
  --query-compute-apps=*) echo "GPU-a, {ours.pid}, 2048"; echo "GPU-a, {theirs.pid}, 140000"; echo "GPU-b, {theirs.pid}, [N/A]" ;;
esac
""")
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        found = runner_fingerprint()
        assert found["driver"] == "570.86"
        assert found["gpus"] == [{"index": 0, "free_mib": 1024, "total_mib": 143771},
                                 {"index": 1, "free_mib": 140000, "total_mib": 143771}]
        foreign = found["foreign_processes"]
        assert [(p["gpu"], p["pid"], p["used_mib"]) for p in foreign] == [(0, theirs.pid, 140000), (1, theirs.pid, None)]
        assert foreign[0]["name"].startswith("python")
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()


def test_an_nvidia_smi_that_answers_otherwise_is_recorded_as_unreadable(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "H200, 550.00, 143771 MiB"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert runner_fingerprint()["nvidia_smi"].startswith("unreadable: nvidia-smi answered")


FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, GPU-a, 1024, 143771, 570.86" ;;
  --query-compute-apps=*) [ -f "{flag}" ] && echo "GPU-a, {pid}, 140000" ;;
esac
exit 0
"""


@pytest.mark.slow
def test_a_foreign_gpu_process_during_a_noisy_measurement_is_a_finding_on_that_row(tmp_path):
    """A fake nvidia-smi on the run's PATH lists another program's compute process on GPU 0 while
    a flag file exists: the noisy throughput row is then an error that names it (its figures
    measured that program too), not judged; without it the same pair is judged as usual."""
    from conftest import planted, refserver_suite, run_pair

    theirs = sleeper({})
    try:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        flag = tmp_path / "foreign-running"
        (bin_dir / "nvidia-smi").write_text(FAKE_SMI.format(flag=flag, pid=theirs.pid))
        (bin_dir / "nvidia-smi").chmod(0o755)
        repo, base, cand = planted(tmp_path, "rename")  # nothing served changes
        suite = refserver_suite(tmp_path / "s.toml", ["throughput"],
                                "[probe.throughput]\nconcurrency = [1]\nwarmup = 0\nfloor_rel = 0.5\nrepeats = 6\n"
                                "max_looks = 1\n", deterministic=False, prompts=1, output_len=8)
        env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        results = {}
        for foreign in (False, True):
            if foreign:
                flag.touch()
            _, results[foreign], _ = run_pair(repo, base, cand, suite, tmp_path / f"out-{foreign}", "--fresh", env=env)
        quiet, loud = (next(c for c in results[f]["comparisons"] if c["probe"] == "throughput") for f in (False, True))
        assert quiet["verdict"] != "error" and "foreign" not in quiet["note"], quiet["note"]
        assert loud["verdict"] == "error", loud
        assert loud["note"].startswith(f"finding: base: foreign GPU process beside the noisy measurement: pid {theirs.pid} ")
        assert f"candidate: foreign GPU process beside the noisy measurement: pid {theirs.pid} " in loud["note"]
        assert "on GPU 0, 140000 MiB, seen before and after" in loud["note"] and "; not judged: " in loud["note"]
        cells = [c for c in results[True]["cells"] if c["probe"] == "throughput"]
        assert all(p["pid"] == theirs.pid for c in cells for p in c["facts"]["runner_foreign"])
        # the launch fingerprint saw it too
        assert all(c["metadata"]["runner"]["foreign_processes"][0]["pid"] == theirs.pid for c in cells)
    finally:
        theirs.kill()
        theirs.wait()
