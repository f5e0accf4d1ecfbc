"""ServerProcess: one inference server as a process group, with its log on disk.

The server gets its own session (process group) so that teardown reaches the scheduler and
detokenizer children SGLang forks, and nothing else. Its stdout+stderr go to a log file the
probes read (SGLang reports pool occupancy only in log lines). Every started server stays
registered until its group is gone, so an interrupt that cut a teardown short can still
finish it (`stop_all`). Several jobs launch at once in threads: the registry and the ports
handed out are kept under a lock.
"""

from __future__ import annotations

import os
import random
import select
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import psutil

from harness.bounded import HEALTH_ANSWER, SERVER_LOG, TooLarge, read_bounded
from harness.errors import LaunchError
from harness.httpcall import AnswerBrokenOff, ConnectionFailed, DeadlinePassed, call
from harness.lifeline import SERVER_MARKER, die_with_parent, register, server_token, unregister
from harness.targets import HOST, TransientLaunchFailure

_live: dict[int, ServerProcess] = {}  # started, group not yet stopped; by id()
# Ports handed to servers of this process and not yet given back: the OS sees a port as free
# from the moment free_port closes its socket until the server binds it, so two threads
# launching at once could otherwise be given the same one.
_ports_taken: set[int] = set()
_lock = threading.Lock()


# How long a server gets to exit on SIGTERM before SIGKILL ($DETCHECK_STOP_GRACE_S; SGLang takes
# seconds: 5.7 s a server on the H200).
STOP_GRACE_S = float(os.environ.get("DETCHECK_STOP_GRACE_S", "10"))


def stop_all(grace_s: float = STOP_GRACE_S) -> None:
    """Stop every server this process started and has not stopped (any thread's)."""
    with _lock:
        servers = list(_live.values())
    for server in servers:
        server.stop(grace_s)


def exit_text(code: int) -> str:
    """`exited with code 1`, or for a negative code `was killed by SIGKILL`."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exited with code {code}"


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether `proc` exited within `timeout_s`, woken by its exit (a pidfd, Linux) rather than
    Popen.wait's sleeps, which double up to 50 ms: a server that exits in 10 ms was noticed
    after up to 30."""
    if proc.poll() is not None:
        return True  # reaped: its pid may already be another process's
    try:
        fd = os.pidfd_open(proc.pid)  # unreaped, the pid is still this process's
    except (AttributeError, OSError):  # not Linux
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        exited, _, _ = select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
    if exited:
        proc.wait()
    return bool(exited)


HEALTH_POLL_PATH = "/health_generate"


def health_poll_s(waited_s: float) -> float:
    """The next health poll's delay: 5% of the wait so far, within 20 ms and 0.25 s, so that
    noticing a server late costs about 5% of its startup, whatever it takes."""
    return min(0.25, max(0.02, 0.05 * waited_s))


@dataclass(frozen=True)
class Launched:
    """What `launch` ended with: the server (already stopped if it failed), the failure if any,
    and why each attempt before the last was tried again (empty: the first attempt decided)."""

    server: ServerProcess
    failure: LaunchError | None
    relaunched: tuple[str, ...] = ()


class LaunchCancelled(LaunchError):
    """The run was interrupted while this server started: it is stopped, and no attempt follows."""


def launch(argv_for_port: Callable[[int], list[str]], env: dict[str, str], log_path: Path,
           cwd: Path | None, timeout_s: float, transient: Sequence[TransientLaunchFailure],
           on_tick: Callable[[float], None] | None = None,
           on_relaunch: Callable[[str], None] | None = None,
           cancelled: Callable[[], bool] = lambda: False) -> Launched:
    """Start a server and wait for it to be healthy. A failure of one of the `transient` kinds
    (the caller's: what they look like is the target's) is tried again on a fresh port, as
    often as that kind allows; `on_relaunch` hears the reason before each new attempt. Every
    attempt appends to `log_path`, and each is judged by what it wrote there itself.

    `cancelled` (the run's interrupt) is read at every health poll and before every attempt: an
    interrupt stops the servers registered when it came (`stop_all`), but one whose start was
    in flight then, or a relaunch after it, is this thread's to stop, at once, not once its
    health wait (minutes on SGLang) has run out."""
    relaunched: list[str] = []
    while True:
        if cancelled():
            raise LaunchCancelled("the run was interrupted before this server started")
        port = free_port()
        server = ServerProcess(argv_for_port(port), env, log_path, port, cwd=cwd)
        try:
            server.start()
            server.wait_healthy(timeout_s, on_tick=on_tick, cancelled=cancelled)
            return Launched(server, None, tuple(relaunched))
        except LaunchCancelled:
            server.stop()
            raise
        except LaunchError as exc:
            server.stop()
            kind = next((k for k in transient if k.matches(f"{exc}\n{server.launch_output()}", port)), None)
            if kind is None:
                return Launched(server, exc, tuple(relaunched))
            if relaunched.count(kind.reason) >= kind.retries:
                reasons = "; ".join(dict.fromkeys([*relaunched, kind.reason]))
                return Launched(server, LaunchError(f"{exc}, on each of {len(relaunched) + 1} ports tried ({reasons})",
                                                    exc.log_tail, exc.exit_code), tuple(relaunched))
            relaunched.append(kind.reason)
            if on_relaunch:
                on_relaunch(kind.reason)
        except BaseException:  # Ctrl-C / SIGTERM while waiting: leave no server behind
            server.stop()
            raise


# Where a server's port is drawn from: below the kernel's ephemeral range. A port the kernel
# hands out on request (bind to port 0: SGLang's NCCL port, torch's stores; every client
# connection's own end) is from that range, and a server binds its port only minutes after it
# was chosen (after its model is loaded): drawn from the ephemeral range, the port was taken in
# between (three H200 launches, 40 servers at once: uvicorn's "address already in use").
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000  # above the well-known and registered ports most services sit on
_port_draw = random.Random()  # its own: a seeded draw elsewhere (placement) stays reproducible


def port_range() -> range | None:
    """The ports a server's port is drawn from: [10000, the ephemeral range's start); None where
    the kernel does not say its range (not Linux) or leaves no room below it."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_LOWEST_PORT, low) if low - _LOWEST_PORT >= 1000 else None


def free_port() -> int:
    """A port free now (it binds) that no other server of this process holds, drawn below the
    ephemeral range where there is one (the kernel's own choice elsewhere); the launch retries
    if someone else takes it first. Given back by `ServerProcess.stop`."""
    ports = port_range()
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, _port_draw.choice(ports) if ports else 0))
            except OSError:  # in use: draw again
                continue
            port = s.getsockname()[1]
        with _lock:
            if port not in _ports_taken:
                _ports_taken.add(port)
                return port


def listeners(port: int) -> set[int | None]:
    """Pids listening on `port` (None where the OS does not say, e.g. another user's)."""
    try:
        conns = psutil.net_connections("tcp")
    except psutil.AccessDenied:
        return set()
    return {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@dataclass
class ServerProcess:
    """A launched server. Use as a context manager so the group is always torn down."""

    argv: Sequence[str]
    env: dict[str, str]
    log_path: Path
    port: int
    cwd: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    startup_s: float = 0.0
    log_start: int = 0  # the log's size when this server started: what came before is another's
    # Set when the harness itself signals the server: its death is then no finding about it.
    stopped_by_harness: bool = False
    # How far the KV canary's lines were read (None: none yet, from log_start on): each probe's
    # cell takes every violation logged since the cell before it (pipeline/outcome.py).
    canary_read: int | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_start = self.log_size()
        log = open(self.log_path, "ab")
        token = server_token()
        try:
            self.proc = subprocess.Popen(
                list(self.argv),
                env={**self.env, SERVER_MARKER: token},  # what a later run's reaping checks for
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            with _lock:
                _live[id(self)] = self
            register(self.proc.pid, token)
        finally:
            log.close()

    def wait_healthy(self, timeout_s: float, on_tick: Callable[[float], None] | None = None,
                     cancelled: Callable[[], bool] = lambda: False) -> float:
        """Poll /health_generate until 200; fail fast if the process exits, or with
        LaunchCancelled once `cancelled()` (the run was interrupted). Returns seconds.
        The poll interval grows with the wait (health_poll_s): a server that is ready waits for
        the next poll, so a fixed 0.25 s cost the reference server's 1.3 s start 10% on
        average, while polling a GPU server's minute of loading every 20 ms gains nothing."""
        assert self.proc is not None
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            if cancelled():
                raise LaunchCancelled("the run was interrupted while this server started", self.log_tail())
            code = self.proc.poll()
            if code is not None:
                raise LaunchError(f"server {exit_text(code)} before becoming healthy",
                                  self.log_tail(), exit_code=code)
            if elapsed > timeout_s:
                raise LaunchError(f"server not healthy after {timeout_s:.0f} s", self.log_tail())
            try:
                # A poll ends by the startup deadline however slowly the server answers it (one
                # that trickles its answer is not healthy).
                r = call("GET", self.url + HEALTH_POLL_PATH, None, min(30.0, max(0.1, timeout_s - elapsed)),
                         HEALTH_ANSWER)
                if r.status_code == 200:
                    self._check_answered_by_own_group(self.proc.pid)
                    self.startup_s = time.monotonic() - t0
                    return self.startup_s
            except (DeadlinePassed, ConnectionFailed, AnswerBrokenOff, TooLarge):
                pass
            if on_tick:
                on_tick(elapsed)
            time.sleep(health_poll_s(time.monotonic() - t0))

    def _check_answered_by_own_group(self, leader: int) -> None:
        """A process that took the port while this server loaded answers health checks too:
        measuring it would credit its answers to this revision (`leader`: this server's process,
        its group's id)."""
        pids = listeners(self.port)
        if any(pid is not None and _group_of(pid) == leader for pid in pids):
            return
        foreign = sorted(pid for pid in pids if pid is not None)
        if foreign:
            raise LaunchError(f"port {self.port} is answered by another process (pid {foreign[0]}), "
                              f"not by this server: address already in use", self.log_tail())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the group, then SIGKILL whatever is left of it."""
        with _lock:
            _ports_taken.discard(self.port)
        if self.proc is None:
            return
        self.stopped_by_harness = True
        pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            if not wait_exit(self.proc, wait):
                continue
            # The leader is gone; children may linger in the group: always finish with SIGKILL.
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)
        with _lock:
            _live.pop(id(self), None)
        unregister(self.proc.pid)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset: int, upto: int | None = None) -> str:
        """Log text written after byte `offset` (probes mark offsets around their requests), and
        before byte `upto` where given, up to SERVER_LOG (TooLarge past it: a server that logs
        gigabytes fails the probe that reads them, never the harness's memory)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = read_bounded(f.read, SERVER_LOG, str(self.log_path))
        except FileNotFoundError:
            return ""
        return (data if upto is None else data[:max(0, upto - offset)]).decode("utf-8", "replace")

    def launch_output(self, limit: int = 256 * 1024) -> str:
        """What this server wrote since it started (its last `limit` bytes): a relaunch appends
        to the same log, and an earlier attempt's words must not decide what this one was."""
        return self.log_since(max(self.log_start, self.log_size() - limit))

    def log_tail(self, lines: int = 30) -> str:
        """The log's last lines, without the access lines of the harness's own health polls:
        while a server starts they can be most of its log, and a failed launch's tail must
        show the server's last words."""
        text = self.log_since(max(0, self.log_size() - 64 * 1024))
        poll = f'"GET {HEALTH_POLL_PATH} '  # uvicorn's access line, as SGLang and the reference server log it
        return "\n".join([line for line in text.splitlines() if poll not in line][-lines:])
