"""The one nvidia-smi reader (harness/nvidia_smi.py), against a fake nvidia-smi on PATH: what
host metadata, the runner fingerprint and the matrix's GPU names read from it, and what each
says without it or with an answer of another shape."""

from __future__ import annotations

import os

import pytest

from harness import nvidia_smi
from harness.metadata import host_metadata
from harness.runner import runner_fingerprint

FAKE = """#!/bin/sh
echo "$@" >> "{log}"
case "$1" in
  --query-gpu=name) echo "NVIDIA H200"; echo "NVIDIA H200" ;;
  --query-gpu=name,driver_version,memory.total) echo "NVIDIA H200, 570.86, 143771"; echo "NVIDIA H200, 570.86, 143771" ;;
  --query-gpu=index,*) echo "0, GPU-a, 1024, 143771, 570.86" ;;
  --query-compute-apps=*) ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    on_path(tmp_path, monkeypatch, FAKE.format(log=tmp_path / "calls"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "calls"


def test_every_reader_asks_the_one_module_in_its_csv_form(fake_smi):
    meta = host_metadata()
    assert (meta["gpu_name"], meta["gpu_driver"], meta["gpu_memory"], meta["gpu_count"]) == \
        ("NVIDIA H200", "570.86", "143771 MiB", 2)
    assert runner_fingerprint()["gpus"] == [{"index": 0, "free_mib": 1024, "total_mib": 143771}]
    assert nvidia_smi.gpu_names() == ["NVIDIA H200", "NVIDIA H200"]
    assert nvidia_smi.gpu_names(visible="1") == ["NVIDIA H200"]  # only the GPUs this process may use
    calls = fake_smi.read_text().splitlines()
    assert calls and all(line.endswith("--format=csv,noheader,nounits") for line in calls), calls


def test_without_nvidia_smi_every_reader_says_so_and_none_guesses(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(nvidia_smi.NvidiaSmiError) as err:
        nvidia_smi.query("gpu", ("name",))
    assert err.value.absent and not nvidia_smi.available()
    assert nvidia_smi.gpu_names() is None
    assert "gpu_name" not in host_metadata()
    assert runner_fingerprint() == {"nvidia_smi": "absent"}


def on_path(tmp_path, monkeypatch, script: str) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_an_answer_of_another_shape_is_an_error_naming_the_line(tmp_path, monkeypatch):
    on_path(tmp_path, monkeypatch, '#!/bin/sh\necho "H200, 550.00"\n')
    with pytest.raises(nvidia_smi.NvidiaSmiError, match="answered 'H200, 550.00', not 3 fields"):
        nvidia_smi.query("gpu", ("name", "driver_version", "memory.total"))
    assert "gpu_name" not in host_metadata() and nvidia_smi.gpu_names() is None


def test_a_failing_nvidia_smi_is_an_error_with_its_exit_status(tmp_path, monkeypatch):
    on_path(tmp_path, monkeypatch, "#!/bin/sh\nexit 9\n")
    with pytest.raises(nvidia_smi.NvidiaSmiError, match="exited 9"):
        nvidia_smi.query("gpu", ("name",))
    assert runner_fingerprint()["nvidia_smi"] == "unreadable: nvidia-smi --query-gpu=index,uuid,memory.free,memory.total,driver_version exited 9"
