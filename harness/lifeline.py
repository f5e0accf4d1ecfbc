"""Servers die with the harness, whatever kills it.

Two mechanisms, because neither alone covers every death:

- The server's leader process asks the kernel for SIGKILL when its parent dies
  (PR_SET_PDEATHSIG, Linux). SGLang's own scheduler and detokenizer processes do the same
  towards the leader, so the whole server goes. This covers `kill -9` of detcheck. The kernel
  counts the *thread* that forked as the parent: a server started from a thread that ends
  before it (a short-lived pool's) is killed then, so servers start from threads that live
  as long as they do (the run's job workers, run_interleaved's launch pool).
- Every started server is recorded under the cache directory with the pids and start times
  of the harness and the server, and a token the server carries in its environment
  (`SERVER_MARKER`). A later run reaps the servers of a harness that is gone, after checking
  each pid still belongs to the process recorded: the same start time, this user's, and the
  record's token in its environment. A reused pid, a process detcheck never started (a record
  naming one), another user's process (a shared cache) are never signalled. This covers
  platforms without PR_SET_PDEATHSIG and servers that ignore it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import uuid
from pathlib import Path

import psutil

from harness.paths import cache_dir
from harness.result_files import atomic_write_json

_PR_SET_PDEATHSIG = 1
# In every server's environment (inherited by its children): the token of its registry record.
SERVER_MARKER = "DETCHECK_SERVER_TOKEN"


# Resolved here, in the harness, once: the child between fork and exec must not dlopen. Servers
# start from worker threads, and a child forked while another thread held the dynamic loader's
# lock would wait for it forever in CDLL, before exec; Popen's caller then waits on that child,
# and a SIGHUP'd run could not wind down (detcheck and a server seen alive 30 s after it).
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """preexec_fn of a server: SIGKILL when the harness process dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _registry() -> Path:
    return cache_dir() / "servers"


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _record_path(server_pid: int) -> Path:
    return _registry() / f"{os.getpid()}-{server_pid}.json"


def _token_prefix() -> str:
    return f"{os.getpid()}-"


def server_token() -> str:
    """A new server's marker value: whose it is, unguessable by any other process."""
    return f"{_token_prefix()}{uuid.uuid4().hex}"


def is_own_token(value: object) -> bool:
    """Whether a SERVER_MARKER value is one `server_token` of this harness process made."""
    return isinstance(value, str) and value.startswith(_token_prefix())


def register(server_pid: int, token: str) -> None:
    atomic_write_json(_record_path(server_pid), {
        "harness_pid": os.getpid(), "harness_started": _started(os.getpid()),
        "server_pid": server_pid, "server_started": _started(server_pid), "token": token})


def started_by_detcheck(pid: int, started: float | None, token: object) -> bool:
    """Whether `pid` is the server a record names: the same process (start time), this user's,
    and carrying the record's token (SERVER_MARKER) in its environment."""
    if started is None or not isinstance(token, str) or not token:
        return False
    try:
        proc = psutil.Process(pid)
        return (proc.create_time() == started and proc.uids().real == os.getuid()
                and proc.environ().get(SERVER_MARKER) == token)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


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
        if started_by_detcheck(server_pid, server_started, rec.get("token")):
            try:
                os.killpg(server_pid, signal.SIGKILL)  # the leader's pid is its group's id
                reaped.append(server_pid)
            except (ProcessLookupError, PermissionError):
                pass
        path.unlink(missing_ok=True)
    return reaped
