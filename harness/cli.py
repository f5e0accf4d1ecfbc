"""detcheck: deterministic-inference validation for SGLang revisions.

Exit codes (README.md's table, word for word as far as each row goes here):
  0    earned by a complete record: every planned (configuration, probe) measured on both
       sides in this run and judged with the suite's parameters, and each reads same (or an
       unknown that does not lean to different)
  1    a probe differs, a cell failed (error), an unknown row leans to different, or the
       record is short of its plan (what is missing named)
  2    bad input, found before anything launched
  3    nothing measured: no probe was compared on both sides (e.g. every configuration n/a
       at a revision); never a pass
  4    I/O error (disk full, read-only directory): the path is named, finished cells stay
       in the store
  130  interrupted: servers stopped (SIGTERM, SIGKILL after $DETCHECK_STOP_GRACE_S, default
       10 s; a second Ctrl-C at once), finished cells kept; the printed detcheck run --resume
       --out D continues
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading

from harness import __version__
from harness.commands import (baseline, bisect, compare, demo, history, localize, make_model, matrix, probes, report, run,
                              selftest)
from harness.commands.common_args import release_out_dirs
from harness.errors import CorruptResult, UsageError
from harness.server import stop_all

COMMANDS = (run, compare, report, demo, bisect, history, matrix, baseline, make_model, selftest, localize, probes)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detcheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"detcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def _terminate(signum, frame):
    # SIGTERM (and a hangup: the terminal or SSH session closed) unwinds like Ctrl-C, so every
    # `finally` stops its server and saves results; servers run in sessions of their own and
    # would otherwise outlive the harness.
    raise KeyboardInterrupt(f"signal {signum}")


# Python runs a signal's handler in the main thread only, at its next bytecode; the kernel may
# hand a signal sent to the process to any of its threads, and then the C-level handler merely
# marks it tripped. A main thread asleep in an untimed lock wait (Future.result, a slot pool's
# Condition) is not woken by that: under load a SIGHUP sent while both servers started was seen
# tripped (gdb: Handlers[SIGHUP].tripped == 1) by a main thread still blocked in sem_wait, the run
# left to its servers' 600 s health wait. Every handled signal also writes its number to the
# wakeup fd; a watcher thread reads it and interrupts the main thread with _NUDGE (its syscall
# returns EINTR, and every tripped handler runs) until the main thread has run _NUDGE's handler,
# so the end after a signal never depends on which thread took it.
_NUDGE = signal.SIGURG  # ignored by default, used by nothing else here: a stray one is harmless
_NUDGE_EVERY_S = 0.05  # how often a main thread that has not yet noticed is interrupted again


@functools.cache  # once a process: main() also runs in-process (tests), each call would leak a pipe and a thread
def _nudge_main_thread_on_signals() -> None:
    """From the main thread: make every handled signal reach the main thread's handlers."""
    noticed = threading.Event()
    signal.signal(_NUDGE, lambda signum, frame: noticed.set())
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C-level handler must never block on it
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    main_thread = threading.get_ident()

    def watch() -> None:
        while True:
            if any(signum != _NUDGE for signum in os.read(read_end, 64)):  # a nudge's own byte asks nothing
                noticed.clear()
                while not noticed.wait(_NUDGE_EVERY_S):
                    signal.pthread_kill(main_thread, _NUDGE)

    threading.Thread(target=watch, name="signal-nudge", daemon=True).start()


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP end the run as Ctrl-C does, whichever thread the kernel gives them to."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # `nohup detcheck …` keeps running
            signal.signal(sig, _terminate)
    _nudge_main_thread_on_signals()


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line; server flags after a lone `--` are appended to every configuration,
    as each `--server-arg` is (`detcheck run … -- --page-size 16 --mem-fraction-static 0.5`)."""
    parser = build_parser()
    if "--" not in argv:
        return parser.parse_args(argv)
    cut = argv.index("--")
    args = parser.parse_args(argv[:cut])
    if not hasattr(args, "server_arg"):
        parser.error(f"server flags after `--` need a command that launches servers (run), not {args.command}")
    args.server_arg = [*args.server_arg, *argv[cut + 1:]]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    install_signal_handlers()
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"detcheck: error: {exc}", file=sys.stderr)
        return 2
    except CorruptResult as exc:
        print(f"detcheck: corrupt result: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only directory: the path, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"detcheck: I/O error: {where}{exc.strerror or exc}; finished cells stay in the store",
              file=sys.stderr)
        return 4
    except KeyboardInterrupt as exc:
        # A second Ctrl-C may have cut a server's teardown short: kill what is left at once.
        stop_all(grace_s=0)
        out = getattr(exc, "resume_out", None)
        resume = f"; `{run.resume_command(out, getattr(exc, 'resume_options', {}))}` continues" if out else ""
        print(f"detcheck: interrupted; servers stopped, finished cells kept{resume}", file=sys.stderr)
        return 130
    finally:
        release_out_dirs()  # the command ended: its run directories are free for the next writer


if __name__ == "__main__":
    sys.exit(main())
