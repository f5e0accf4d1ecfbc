"""The runner's state at each launch (issue 35): per GPU its free and total memory, the driver, and
the compute processes on the GPUs that are not this harness's servers (a foreign process
shares the card with a measurement). Read from nvidia-smi (harness/nvidia_smi.py) just before
each server starts and kept in the cells' metadata (`runner`); where nvidia-smi is absent (a
CPU machine) that is what is recorded, never a guess.

Around every noisy measurement it is read again, before and after (`Watch`): a foreign process
on the server's GPUs at either end is the cell's `runner_foreign` fact, which compare.py reads
as a finding on the row (a noisy figure measured beside another program's work is no
measurement of the revision).

A process is the harness's own when its environment carries a server token of this harness
(`lifeline.is_own_token`, set on every server it starts and inherited by their children).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psutil

from harness import nvidia_smi
from harness.lifeline import SERVER_MARKER, is_own_token

GPU_FIELDS = ("index", "uuid", "memory.free", "memory.total", "driver_version")
APP_FIELDS = ("gpu_uuid", "pid", "used_memory")
# The cell fact naming the foreign compute processes seen around a noisy measurement.
FOREIGN_FACT = "runner_foreign"


def runner_fingerprint() -> dict[str, Any]:
    """{"nvidia_smi": "absent"} without nvidia-smi; else the driver, each GPU's memory (MiB) and
    the foreign compute processes; {"nvidia_smi": "<why unreadable>"} when it answers otherwise."""
    try:
        gpus = nvidia_smi.query("gpu", GPU_FIELDS)
        apps = nvidia_smi.query("compute-apps", APP_FIELDS)
        index = {uuid: int(i) for i, uuid, *_ in gpus}
        return {
            "driver": gpus[0][4] if gpus else None,
            "gpus": [{"index": int(i), "free_mib": int(float(free)), "total_mib": int(float(total))}
                     for i, _, free, total, _ in gpus],
            "foreign_processes": [{"gpu": index.get(uuid), "pid": int(pid), "used_mib": _mib(used),
                                   "name": _name(int(pid))}
                                  for uuid, pid, used in apps if not _ours(int(pid))],
        }
    except nvidia_smi.NvidiaSmiError as exc:
        return {"nvidia_smi": "absent" if exc.absent else f"unreadable: {exc}"}
    except ValueError as exc:  # a field that is not the number it should be
        return {"nvidia_smi": f"unreadable: {exc}"}


@dataclass
class Watch:
    """The runner read before and after one noisy measurement on a server's GPUs (`devices`:
    its CUDA_VISIBLE_DEVICES indices; None: every GPU)."""

    devices: tuple[int, ...] | None
    before: dict[str, Any] | None = None

    def start(self) -> None:
        self.before = runner_fingerprint()

    def foreign(self) -> list[dict[str, Any]]:
        """The foreign processes on the watched GPUs at either end (each once, by GPU and pid,
        with when it was seen); [] without nvidia-smi."""
        return merged_foreign([[{**proc, "seen": [when]} for proc in found.get("foreign_processes") or ()
                                if self.devices is None or proc["gpu"] in self.devices]
                               for when, found in (("before", self.before or {}), ("after", runner_fingerprint()))])


def merged_foreign(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several measurements' foreign processes (an interleaved probe's rounds) as one list: each
    process once, by GPU and pid, with every end of a round it was seen at."""
    seen: dict[tuple, dict[str, Any]] = {}
    for procs in parts:
        for proc in procs:
            known = seen.setdefault((proc["gpu"], proc["pid"]), {**proc, "seen": []})
            known["seen"] = [*known["seen"], *(w for w in proc.get("seen") or () if w not in known["seen"])]
    return list(seen.values())


def visible_devices(env: dict[str, str]) -> tuple[int, ...] | None:
    """The GPU indices a server's CUDA_VISIBLE_DEVICES names (None: unset, or not plain indices,
    such as UUIDs: then every GPU is watched)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    parts = [p.strip() for p in (value or "").split(",") if p.strip()]
    if value is None or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def foreign_text(facts: dict[str, Any]) -> str:
    """"a foreign GPU process ran beside the measurement: pid 4242 (python3) on GPU 0, 140000 MiB,
    seen before and after" from a cell's facts; "" where none was seen."""
    procs = facts.get(FOREIGN_FACT) or ()
    if not procs:
        return ""
    shown = "; ".join(_process_text(p) for p in procs)
    return f"foreign GPU process{'es' if len(procs) > 1 else ''} beside the noisy measurement: {shown}"


def _process_text(proc: dict[str, Any]) -> str:
    name = f" ({proc['name']})" if proc.get("name") else ""
    used = f", {proc['used_mib']} MiB" if proc.get("used_mib") is not None else ""
    return f"pid {proc['pid']}{name} on GPU {proc['gpu']}{used}, seen {' and '.join(proc.get('seen') or ())}"


def _mib(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]" where the driver does not report it
        return None


def _ours(pid: int) -> bool:
    try:
        return is_own_token(psutil.Process(pid).environ().get(SERVER_MARKER))
    except (psutil.Error, OSError):
        return False  # another user's, or gone: not ours either way


def _name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None
