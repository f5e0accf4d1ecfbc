"""Servers die with the harness, whatever kills it.

Two mechanisms, because neither alone covers every death:

- The server's leader process asks the kernel for SIGKILL when its parent dies
  (PR_SET_PDEATHSIG, Linux). SGLang's own scheduler and detokenizer processes do the same
  towards the leader, so the whole server goes. This covers `kill -9` of detcheck. The kernel
  counts the *thread* that forked as the parent: a server started from a thread that ends
  before it (a short-lived pool's) is killed then, so servers start from threads that live
  as long as they do (the run's job workers, run_interleaved's launch pool).
- Every started server is recorded under the cache directory with the pids and start times
  of the harness and the server. A later run reaps the servers of a harness that is gone,
  after checking each pid still belongs to the process recorded (start time), so a reused
  pid is never signalled. This covers platforms without PR_SET_PDEATHSIG and servers that
  ignore it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

import psutil

from harness.paths import cache_dir
from harness.result_files import atomic_write_json

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn of a server: SIGKILL when the harness process dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _registry() -> Path:
    return cache_dir() / "servers"


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _record_path(server_pid: int) -> Path:
    return _registry() / f"{os.getpid()}-{server_pid}.json"


def register(server_pid: int) -> None:
    atomic_write_json(_record_path(server_pid), {
        "harness_pid": os.getpid(), "harness_started": _started(os.getpid()),
        "server_pid": server_pid, "server_started": _started(server_pid)})


def unregister(server_pid: int) -> None:
    _record_path(server_pid).unlink(missing_ok=True)


def reap_orphans() -> list[int]:
    """Kill the process groups of servers whose harness is gone; returns their pids."""
    reaped = []
    for path in sorted(_registry().glob("*.json")) if _registry().is_dir() else ():
        try:
            rec = json.loads(path.read_text())
            harness_alive = _started(rec["harness_pid"]) == rec["harness_started"]
            server_pid, server_started = int(rec["server_pid"]), rec["server_started"]
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # a torn record: nothing can be verified, so nothing is signalled
            continue
        if harness_alive:
            continue
        if server_started is not None and _started(server_pid) == server_started:
            try:
                os.killpg(server_pid, signal.SIGKILL)  # the leader's pid is its group's id
                reaped.append(server_pid)
            except (ProcessLookupError, PermissionError):
                pass
        path.unlink(missing_ok=True)
    return reaped
