"""The runner fingerprint of each launch (harness/runner.py): nvidia-smi absent is recorded as
absent; present, each GPU's memory, the driver and the compute processes that are not this
harness's servers (told apart by the server token in their environment)."""

from __future__ import annotations

import os
import subprocess
import sys

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
