"""Options and the ending that several commands share (asv's common_args): revisions, how
to run, and the tail every command that judges a run ends with (render, exit code, baseline
gate). Commands import this module, never one another."""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import shutil
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, TextIO

from harness import baseline, completeness
from harness.compare import leaning, overall
from harness.envs import DEFAULT_BUILD_TIMEOUT_S, DEFAULT_ENV_FILE, EnvOptions
from harness.errors import UsageError
from harness.observer import QuietObserver, RunObserver
from harness.paths import cache_dir
from harness.redaction import redact_command
from harness.report.console import ConsoleObserver
from harness.report.emit import FORMATS, emit
from harness.localize import LOCALIZE_DIR, LOCALIZE_FILE, SECTION_FILE
from harness.report.files import PLOT_DIR, REPORT_FILE, report_files
from harness.result_files import run_files
from harness.results import Role, RunResult
from harness.revisions import Revision, uncommitted_changes
from harness.jobs import REPRODUCER_BUDGET
from harness.pipeline.slots import check_slot_count, cpu_slots, default_slot_count
from harness.pipeline.start_order import JobTimes, StartOrder, read_job_times
from harness.pipeline.steps import LOG_DIR, server_logs
from harness.run import RunRequest
from harness.selftest import SELFTEST_FILE, SELFTEST_REPORT
from harness.slurm import SLURM_DIR
from harness.verdict_stats import Verdict
from harness.targets import TARGET_NAMES, TARGETS, target_of_checkout
from harness.typed_toml import TOO_DEEP

# Exit codes, as `detcheck --help` and README list them.
EXIT_SAME, EXIT_DIFFERENT, EXIT_USAGE, EXIT_NOTHING_MEASURED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def command_line() -> str:
    """This detcheck invocation as results record it, secrets masked."""
    return shlex.join(redact_command(["detcheck", *sys.argv[1:]]))


def add_format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="console", help="what to print at the end")


def add_revision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=Path, help="git checkout of SGLang (or of a reference-server "
                   "fixture repo); omit to run the installed package as both sides")
    p.add_argument("--base", default=None, help="base git ref (e.g. main)")
    p.add_argument("--candidate", default=None, help="candidate git ref (e.g. HEAD or a branch)")


TARGET_HELP = ("server to launch: sglang, or refserver (the CPU reference server). Default: what "
               "--repo holds (python/sglang: sglang; python/refserver, a fixture repo: refserver); "
               "refserver without --repo. The target chosen is printed at the start")


def add_target_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=TARGET_NAMES, default=None, help=TARGET_HELP)


def chosen_target(target: str | None, repo: Path | None, named_by: str = "--target") -> str:
    """`target` (given by `named_by`), else the one --repo's tree holds, else refserver; printed
    (stderr), so that an SGLang checkout never silently launches the reference server."""
    if target is not None:
        why = named_by
    elif repo is None:
        target, why = "refserver", "no --repo"
    else:
        found = target_of_checkout(repo)
        if found is None:
            raise UsageError(f"--repo {repo} holds neither "
                             f"{' nor '.join(f'{t.package_dir}/{t.package}' for t in TARGETS.values())}: "
                             f"name the target with {named_by}")
        target, why = found.name, f"{found.package_dir}/{found.package} in --repo"
    print(f"detcheck: target {target} ({why})", file=sys.stderr)
    return target


def add_execution_args(p: argparse.ArgumentParser) -> None:
    add_target_arg(p)
    p.add_argument("--out", type=Path, default=None,
                   help="output directory for results.json, report.md, logs (default: "
                        "$DETCHECK_CACHE_DIR/runs/<suite>-<time>, printed)")
    p.add_argument("--store", type=Path, default=None,
                   help="result store reused across runs (default: $DETCHECK_CACHE_DIR/store)")
    p.add_argument("--fresh", action="store_true", help="ignore stored cells and measure again")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run in --out: finished cells come from the store, "
                        "only the rest is launched")
    p.add_argument("--force", action="store_true",
                   help="replace the run an existing --out holds (its results, report, logs, plots)")
    p.add_argument("--config", action="append", default=[], metavar="NAME",
                   help="run only this configuration (repeatable)")
    p.add_argument("--probe", action="append", default=[], metavar="NAME",
                   help="run only this probe (repeatable)")
    add_python_args(p)
    add_env_args(p)
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="extra server argument appended to every configuration (repeatable; "
                        "use --server-arg=--flag for dashes, or put the flags after a lone `--`: "
                        "`detcheck run … -- --page-size 16`)")
    p.add_argument("--set", action="append", default=[], metavar="PROBE.PARAM=VALUE", dest="overrides",
                   help="a probe parameter over the suite's [probe.<name>] table, checked like it "
                        "(repeatable; the value is read as TOML, else as a string: --set kl.tau=1e-6 "
                        "--set throughput.concurrency=[1,4]); recorded in results.json")
    p.add_argument("--slots", type=int, default=None, metavar="N",
                   help="servers up at once: every configuration's base and candidate jobs run "
                        "concurrently within N (an interleaved configuration takes 2 together); "
                        "1 runs them one after another. Default: half the CPU cores for refserver, "
                        "2 for sglang (the memory for N servers must fit: see matrix.toml's servers_per_gpu)")
    p.add_argument("--reproducer-budget", type=int, default=REPRODUCER_BUDGET, metavar="N",
                   help="requests a different row's reproducer may post to both sides' servers to verify and "
                        "shrink it before it is published (both sides together; servers started again where the "
                        f"row's are down); 0 publishes it from the samples alone, unverified (default {REPRODUCER_BUDGET})")
    p.add_argument("--parallel", action="store_true",
                   help="at least 2 slots: base and candidate of a configuration at the same time "
                        "(kept for scripts; --slots says how many)")
    add_start_order_args(p)
    add_format_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_python_args(p: argparse.ArgumentParser, default: str = "the one running detcheck, which has "
                    "SGLang only if detcheck was installed into SGLang's environment") -> None:
    """The servers' interpreters: every command that launches servers of both sides takes these."""
    p.add_argument("--python", default=None,
                   help=f"interpreter that runs the servers: the one SGLang is installed in (default: {default})")
    p.add_argument("--base-python", default=None, metavar="PYTHON",
                   help="interpreter of the base's servers only: a revision that needs other packages "
                        "(another torch or kernel wheel) runs from its own environment; wins over the "
                        "environment its --env-file would build")
    p.add_argument("--candidate-python", default=None, metavar="PYTHON",
                   help="interpreter of the candidate's servers only; wins over its --env-file")


def check_pythons(pythons: dict[str, str | None]) -> None:
    """Each interpreter given (by its option) exists, before anything starts."""
    for option, python in pythons.items():
        if python and shutil.which(python) is None:
            raise UsageError(f"{option} {python}: no such executable")


def role_pythons(base: str | None, candidate: str | None) -> dict[Role, str]:
    return {role: python for role, python in ((Role.BASE, base), (Role.CANDIDATE, candidate)) if python}


def add_env_args(p: argparse.ArgumentParser) -> None:
    """How a revision gets its own environment: every command that launches servers takes these."""
    p.add_argument("--env-file", default=None, metavar="REL",
                   help="pip requirements file, relative to each revision's tree, that gives the revision "
                        "its own environment: a venv with --system-site-packages over --python, built once "
                        "per (sha, file content, interpreter) in the cache; a revision without the file "
                        f"runs on --python (default {DEFAULT_ENV_FILE}; SGLang: point it at the checkout's "
                        "own requirements file)")
    p.add_argument("--env-pip-arg", action="append", default=[], metavar="ARG",
                   help="argument passed to `pip install` when an environment is built (repeatable; "
                        "offline: --env-pip-arg=--no-index --env-pip-arg=--find-links=DIR; part of the "
                        "environment's key; --target, --prefix, --root and --user are refused)")
    p.add_argument("--env-build-timeout", type=float, default=DEFAULT_BUILD_TIMEOUT_S, metavar="SECONDS",
                   help="time limit of one environment's build; past it the build is killed and the "
                        f"revision's cells are errors naming it (default {DEFAULT_BUILD_TIMEOUT_S:g})")


def add_start_order_args(p: argparse.ArgumentParser) -> None:
    """Which waiting job starts next when there are more jobs than slots (harness.pipeline.start_order)."""
    p.add_argument("--order-from", action="append", default=[], type=Path, metavar="PATH",
                   help="start the longest jobs first, their times read from earlier runs: a results.json, "
                        "a run directory, or a folder of them (a matrix run's --out); repeatable. A job no "
                        "earlier run timed starts first. Default: plan order")
    p.add_argument("--first-per-model", action=argparse.BooleanOptionalAction, default=None,
                   help="start one server per model first and the model's other servers once it is up: "
                        "on a machine whose kernel caches are cold, each model's JIT kernels are then "
                        "compiled once, not by every server at once (default: off; a matrix entry's "
                        "first_per_model)")


def start_order_from(args: argparse.Namespace, order_from: tuple[Path, ...] = (),
                     first_per_model: bool = False) -> StartOrder:
    """The options' start order: their --order-from runs after a matrix entry's `order_from`,
    and --(no-)first-per-model over the entry's `first_per_model`."""
    paths = (*order_from, *args.order_from)
    return StartOrder(read_job_times(paths) if paths else JobTimes(),
                      first_per_model if args.first_per_model is None else args.first_per_model)


def env_options_from(args: argparse.Namespace) -> EnvOptions:
    return EnvOptions(args.env_file or DEFAULT_ENV_FILE, tuple(args.env_pip_arg), args.env_build_timeout)


def revisions_from(args: argparse.Namespace) -> tuple[Revision, Revision]:
    if args.repo is None:
        if args.base or args.candidate:
            raise UsageError("--base/--candidate need --repo")
        return Revision.installed("installed"), Revision.installed("installed")
    if not args.base or not args.candidate:
        raise UsageError("--repo needs both --base and --candidate")
    base, candidate = Revision.resolve(args.repo, args.base), Revision.resolve(args.repo, args.candidate)
    dirty = uncommitted_changes(base.repo)
    if dirty:
        print(f"detcheck: warning: --repo {base.repo} has uncommitted changes ({dirty}); the "
              f"committed revisions are tested: base {base.short()}, candidate {candidate.short()}",
              file=sys.stderr)
    return base, candidate


# The lock file of the one detcheck writing a run directory (`hold_out_dir`); it holds that
# process's pid, for the message that refuses a second writer.
OUT_LOCK = ".detcheck.lock"
# What detcheck writes into a run directory besides its results, report, logs and plots: a
# localize's record and dumps, a slurm run's job folders, a selftest's summary.
OWN_NAMES = (OUT_LOCK, LOCALIZE_FILE, SECTION_FILE, LOCALIZE_DIR, SLURM_DIR, SELFTEST_FILE, SELFTEST_REPORT)
# The run directories this process writes: each one's locked file, and whether this process made
# the directory (one that bad input stopped before anything was written is then removed again).
_held: dict[Path, tuple[TextIO, bool]] = {}


def hold_out_dir(out: Path) -> None:
    """One writer per run directory: an exclusive lock on its OUT_LOCK, held until this process
    ends (the kernel releases it however it ends: a crash leaves nothing held) or `release_out_dirs`.
    A directory another detcheck holds is bad input naming that process."""
    key = out.resolve()
    if key in _held:
        return
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        # never through a link: the pid written below would truncate whatever file it names
        handle = os.fdopen(os.open(out / OUT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644), "r+")
    except OSError as exc:  # not a directory, not writable, the lock a link
        raise UsageError(f"--out {out} is not writable ({exc.filename or out}: {exc.strerror or exc})") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise UsageError(f"--out {out} is being written by another detcheck (pid {holder}); wait for it to "
                         f"end, or pass another --out") from None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _held[key] = handle, made


def release_out_dirs() -> None:
    """The run directories this process held, free for another writer (its command ended); one
    it made that holds nothing but the lock (bad input ended the command) is removed."""
    while _held:
        out, (handle, made) = _held.popitem()
        # (a command that removed its directory itself, the demo's temporary one, left nothing)
        if made and out.is_dir() and [p.name for p in out.iterdir()] == [OUT_LOCK]:
            (out / OUT_LOCK).unlink()
            out.rmdir()
        handle.close()  # closing the file releases its lock


def foreign_files(out: Path) -> list[str]:
    """What a run directory without results holds that detcheck did not write, by name relative
    to it: anything but an interrupted run's server logs, detcheck's own files (OWN_NAMES) and
    folders that hold a run of their own (a selftest's)."""
    if not out.is_dir():
        return []
    logs = set(server_logs(out))
    found: list[Path] = []
    for entry in out.iterdir():
        if entry.name == LOG_DIR and entry.is_dir() and not entry.is_symlink():
            found += [p for p in entry.iterdir() if p not in logs]
        elif entry.name not in OWN_NAMES and not (entry.is_dir() and run_files(entry)):
            found.append(entry)
    return sorted(str(p.relative_to(out)) for p in found)


def claim_out_dir(out: Path, force: bool, resumable: bool = True) -> None:
    """An --out is never overwritten by accident. One holding another run (results.json, or
    results.json.gz or .xz): `--resume` continues it (`resumed_run`), --force replaces it: the
    files detcheck wrote there go (results, report, server logs, the plots the report links), so
    they are not appended across runs; anything else in the directory stays. One holding files
    detcheck did not write: refused without --force, and with it they stay, the user's own
    report.md never replaced. `resumable`: whether the command has --resume to offer (demo has
    not). The directory is held for this process first (`hold_out_dir`)."""
    hold_out_dir(out)
    earlier = run_files(out)
    if not earlier:
        foreign = foreign_files(out)
        if foreign and not force:
            shown = ", ".join(foreign[:5]) + (f", … ({len(foreign)} in all)" if len(foreign) > 5 else "")
            raise UsageError(f"--out {out} holds files detcheck did not write ({shown}); pass --force to write "
                             f"the run beside them (they are kept), or another --out")
        if REPORT_FILE in foreign:
            raise UsageError(f"--out {out}: {REPORT_FILE} was not written by detcheck (no run beside it), and "
                             f"--force replaces only what detcheck wrote: move it, or pass another --out")
        return
    if not force:
        raise UsageError(f"--out {out} holds an earlier run; pass "
                         f"{'--resume to continue it or ' if resumable else ''}--force to replace it")
    for path in [*earlier, *server_logs(out), *report_files(out)]:
        path.unlink(missing_ok=True)
    for folder in (out / LOG_DIR, out / PLOT_DIR):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--set probe.param=value` options as {probe: {param: value}}; the value read as a TOML
    value (1e-6, true, [1, 4], "text"), else taken as the string it is (DFLASH)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, eq, text = item.partition("=")
        probe, dot, param = name.strip().partition(".")
        if not (eq and dot and probe and param):
            raise UsageError(f"--set {item}: expected PROBE.PARAM=VALUE (e.g. kl.tau=1e-6)")
        try:
            value = tomllib.loads(f"value = {text.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        except RecursionError:
            raise UsageError(f"--set {item[:40]}{'…' if len(item) > 40 else ''}: {TOO_DEEP}") from None
        out.setdefault(probe, {})[param] = value
    return out


def request_from(args: argparse.Namespace, base: Revision, candidate: Revision, suite: Path,
                 target_named_by: str = "--target", options: dict[str, Any] | None = None) -> RunRequest:
    """`options`: the command's options as results.json records them (what `--resume` restores)."""
    target = chosen_target(args.target, args.repo, target_named_by)
    check_pythons({"--python": args.python, "--base-python": args.base_python,
                   "--candidate-python": args.candidate_python})
    out = args.out or default_out(suite.stem)
    if args.resume:  # a resumed --out was checked to hold the run it continues
        hold_out_dir(out)
    else:
        claim_out_dir(out, args.force)
    return RunRequest(
        suite_path=suite, target=target, base=base, candidate=candidate,
        out_dir=out, store_root=args.store or cache_dir() / "store", fresh=args.fresh,
        python=args.python, only_configs=tuple(args.config), only_probes=tuple(args.probe),
        role_python=role_pythons(args.base_python, args.candidate_python),
        env_options=env_options_from(args),
        extra_args=tuple(args.server_arg),
        slots=cpu_slots(slot_count(args, target)),
        start_order=start_order_from(args),
        command_line=command_line(),
        overrides=parse_overrides(args.overrides),
        options=options or {},
        reproducer_budget=check_budget(args.reproducer_budget),
    )


def check_budget(n: int) -> int:
    if n < 0:
        raise UsageError(f"--reproducer-budget {n}: at least 0 (0: reproducers unverified)")
    return n


def default_out(name: str) -> Path:
    """Where a run goes without --out: under the cache directory, not the working directory,
    which is often a checkout (SGLang's, where results/ would be untracked clutter). Said on
    stderr, since nobody chose it."""
    out = cache_dir() / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"detcheck: no --out: writing to {out}", file=sys.stderr)
    return out


def slot_count(args: argparse.Namespace, target: str) -> int:
    count = check_slot_count(args.slots) if args.slots is not None else default_slot_count(target)
    return max(count, 2) if args.parallel else count


def observer_for(args: argparse.Namespace) -> RunObserver:
    quiet = args.no_progress or args.format == "json"
    return QuietObserver() if quiet else ConsoleObserver()


def exit_code(verdict: Verdict) -> int:
    """asv continuous style: 1 when the candidate differs or a cell failed; 3 when nothing was
    compared (every configuration n/a); 0 otherwise."""
    if verdict in (Verdict.DIFFERENT, Verdict.ERROR):
        return EXIT_DIFFERENT
    return EXIT_NOTHING_MEASURED if verdict == Verdict.NOTHING_MEASURED else EXIT_SAME


def run_exit_code(result: RunResult, gaps: list[str] | None = None) -> int:
    """A run's exit code: its verdict's, and 1 where an *unknown* row already leans to
    *different* (`compare.leaning`), or the record is no complete judgement of its plan
    (`gaps`, by default `completeness.gaps`): neither is a pass."""
    code = exit_code(overall(result.comparisons))
    if completeness.gaps(result) if gaps is None else gaps:
        return EXIT_DIFFERENT
    return EXIT_DIFFERENT if code == EXIT_SAME and leaning(result) else code


def gap_lines(where: object, gaps: list[str]) -> list[str]:
    """What keeps a run from being a pass, as the lines a command prints (stderr)."""
    return [f"detcheck: {where}: not a pass: {completeness.summary(gaps)}"] if gaps else []


def print_gate(path: Path, result: RunResult, file: TextIO | None = None) -> int:
    """Gate `result` on the baselines at `path`, print the checks; 1 when any fails."""
    code, lines = gate_result(path, result)
    print("\n".join(lines), file=file)
    return code


def gate_result(path: Path, result: RunResult) -> tuple[int, list[str]]:
    """The exit code of gating `result` on the baselines at `path` (1 when a check fails), and
    the lines that say how each check went."""
    baselines = baseline.load(path)
    checks, unmatched = baseline.gate(result, baselines)
    # an empty check, a candidate cell that never served, a record short of its plan: no pass
    unchecked = [*baseline.unchecked(result, checks, baselines), *completeness.gaps(result)]
    failed = baseline.failed(checks) or bool(unchecked)
    return (EXIT_DIFFERENT if failed else EXIT_SAME), baseline.gate_lines(path, checks, unmatched, unchecked)


def check_baseline_file(path: Path | None) -> None:
    """Read and validate a --baseline file before anything launches: a bad one is exit 2 now,
    not after a suite's worth of launches."""
    if path is not None:
        baseline.load(path)


def conclude(result: RunResult, fmt: str, out_dir: Path | None, baseline_file: Path | None = None,
             also: list[str] | None = None, judged: bool = True) -> int:
    """Render `result` (JSON with the verdict and this exit code in it), gate it on a baselines
    file if one is given, and return the exit code. What keeps the record from being a pass
    (`completeness.gaps`, and `also`: where it is not judged as its suite judges) is said on
    stderr (unless `judged` is False: a report asked for no verdict), and the code is then 1."""
    gaps = [*completeness.gaps(result), *(also or [])]
    code = run_exit_code(result, gaps)
    for line in gap_lines(out_dir or result.suite, gaps) if judged else ():
        print(line, file=sys.stderr)
    gate_lines: list[str] = []
    if baseline_file is not None:
        gated, gate_lines = gate_result(baseline_file, result)
        code = max(code, gated)
    emit(result, fmt, out_dir, exit_code=code, also=also or ())
    if gate_lines:
        print("\n".join(gate_lines), file=sys.stderr if fmt == "json" else None)
    return code
