"""The runner's state at each launch (issue 35): per GPU its free and total memory, the driver, and
the compute processes on the GPUs that are not this harness's servers (a foreign process
shares the card with a measurement). Read from nvidia-smi just before each server starts and
kept in the cells' metadata (`runner`); where nvidia-smi is absent (a CPU machine) that is what
is recorded, never a guess.

A process is the harness's own when its environment carries this harness's server token
(`lifeline.SERVER_MARKER`, set on every server it starts and inherited by their children).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import psutil

from harness.lifeline import SERVER_MARKER

QUERY_TIMEOUT_S = 30
GPU_QUERY = ("--query-gpu=index,uuid,memory.free,memory.total,driver_version", "--format=csv,noheader,nounits")
APP_QUERY = ("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")


def runner_fingerprint() -> dict[str, Any]:
    """{"nvidia_smi": "absent"} without nvidia-smi; else the driver, each GPU's memory (MiB) and
    the foreign compute processes; {"nvidia_smi": "<why unreadable>"} when it answers otherwise."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"nvidia_smi": "absent"}
    try:
        gpus = [_fields(line, 5) for line in _query(smi, GPU_QUERY)]
        apps = [_fields(line, 3) for line in _query(smi, APP_QUERY)]
        index = {uuid: int(i) for i, uuid, *_ in gpus}
        out: dict[str, Any] = {
            "driver": gpus[0][4] if gpus else None,
            "gpus": [{"index": int(i), "free_mib": int(float(free)), "total_mib": int(float(total))}
                     for i, _, free, total, _ in gpus],
            "foreign_processes": [{"gpu": index.get(uuid), "pid": int(pid), "used_mib": _mib(used),
                                   "name": _name(int(pid))}
                                  for uuid, pid, used in apps if not _ours(int(pid))],
        }
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"nvidia_smi": f"unreadable: {exc}"}
    return out


def _query(smi: str, args: tuple[str, ...]) -> list[str]:
    proc = subprocess.run([smi, *args], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    if proc.returncode != 0:
        raise ValueError(f"nvidia-smi {args[0]} exited {proc.returncode}")
    return [line for line in proc.stdout.splitlines() if line.strip()]


def _fields(line: str, n: int) -> list[str]:
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != n:
        raise ValueError(f"nvidia-smi answered {line!r}, not {n} fields")
    return fields


def _mib(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]" where the driver does not report it
        return None


def _ours(pid: int) -> bool:
    try:
        return psutil.Process(pid).environ().get(SERVER_MARKER, "").startswith(f"{os.getpid()}-")
    except (psutil.Error, OSError):
        return False  # another user's, or gone: not ours either way


def _name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None
