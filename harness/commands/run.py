"""detcheck run: base vs candidate over a suite, one server per (configuration, revision).

`--resume --out D` continues the run in D with its own options (results.json's
`metadata.options`); an option given with it that changes what is compared is refused."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.commands.common_args import (add_execution_args, add_revision_args, check_baseline_file, conclude,
                                          observer_for, parse_overrides, request_from, revisions_from)
from harness.errors import UsageError
from harness.redaction import REDACTED, redact_argv, scrub, url_credentials
from harness.report.junit import junit_xml
from harness.result_files import RESULTS_FILE, atomic_write_text, read_run, run_files
from harness.results import RevisionInfo
from harness.revisions import Revision
from harness.run import execute


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="compare a candidate revision against a base over a suite",
                       description=__doc__)
    add_revision_args(p)
    # Not required by argparse: `--resume --out D` takes the suite from D's run.
    p.add_argument("--suite", type=Path, help="suite TOML file (see suites/); required unless --resume")
    add_execution_args(p)
    p.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="also gate each candidate cell on this baselines file (see `detcheck baseline`)")
    p.add_argument("--trust-recorded", action="store_true",
                   help="with --resume: run the interpreters, pip arguments and server arguments the run in "
                        "--out records (printed) even where they differ from this run's options")
    p.add_argument("--junit-xml", type=Path, default=None, metavar="FILE",
                   help="also write the run as JUnit XML: one test case per (configuration, probe), "
                        "failed when it differs or errs, the row's reason as the failure's text")
    p.set_defaults(func=run, option_defaults={option.dest: p.get_default(option.dest) for option in RUN_OPTIONS})


def run(args: argparse.Namespace) -> int:
    resumed = resumed_run(args) if args.resume else None  # args completed from the run in --out
    if args.suite is None:
        raise UsageError("--suite is required (or `--resume --out DIR`, which takes the suite of the run in DIR)")
    check_baseline_file(args.baseline)
    base, candidate = (resumed.base, resumed.candidate) if resumed else revisions_from(args)
    req = request_from(args, base, candidate, args.suite, options=recorded_options(args),
                       target_named_by=f"the run in {args.out}" if resumed else "--target")
    if resumed:
        req = dataclasses.replace(req, earlier_sessions=resumed.sessions)
    result = execute(req, observer_for(args))
    if args.junit_xml is not None:
        atomic_write_text(args.junit_xml, junit_xml(result))
    code = conclude(result, args.format, req.out_dir, args.baseline)
    if args.format == "console":
        print(f"results: {req.out_dir / 'results.json'}  report: {req.out_dir / 'report.md'}")
    return code


# -- what results.json records of the command line, and --resume restores ------------------

def absolute(path: str | Path | None) -> str | None:
    return None if path is None else str(Path(path).resolve())


def executable(python: str | None) -> str | None:
    """An interpreter as an absolute path (a bare name is looked up on PATH now, where the run
    starts); not resolved further: a venv's python is a link to its base interpreter, and the
    two are different environments."""
    return None if python is None else os.path.abspath(shutil.which(python) or python)


def as_is(value: Any) -> Any:
    return value


def optional_path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def without_secrets(args: list[str]) -> list[str]:
    """Arguments as results.json may hold them: a secret flag's value and a URL's credentials
    masked (`--api-key sk-…`, `--index-url https://user:pw@…`), as in the recorded command."""
    credentials = url_credentials(args)
    return [scrub(arg, credentials) for arg in redact_argv(list(args))]


@dataclass(frozen=True)
class Recorded:
    """How an option's value is written into results.json, read back into the options, and
    compared with a value given to `--resume` (two spellings of one file are the same)."""

    record: Callable[[Any], Any] = as_is
    restore: Callable[[Any], Any] = as_is
    key: Callable[[Any], Any] = as_is


VALUE = Recorded()
PATH = Recorded(absolute, optional_path, absolute)
PATHS = Recorded(lambda paths: [absolute(p) for p in paths], lambda paths: [Path(p) for p in paths],
                 lambda paths: [absolute(p) for p in paths])
EXECUTABLE = Recorded(executable, as_is, as_is)
ARGUMENTS = Recorded(without_secrets, as_is, as_is)  # compared masked: a secret given again matches
OVERRIDES = Recorded(as_is, as_is, parse_overrides)  # `--set kl.tau=1e-6` is `--set kl.tau=0.000001`


@dataclass(frozen=True)
class RunOption:
    """An option of `run` that results.json records and `--resume` restores when it is not given."""

    dest: str  # the argparse destination
    flag: str
    # Whether it decides what is measured or compared: given with --resume, it must be what the
    # stored run had. One that says only how the run goes (--slots, --store) may be given anew.
    measured: bool
    recorded: Recorded = VALUE


# --base and --candidate are not among them: results.json holds each side's ref and sha, and a
# resume continues at those shas (`resumed_revision`).
RUN_OPTIONS = (
    RunOption("repo", "--repo", True, PATH),
    RunOption("suite", "--suite", True, PATH),
    RunOption("target", "--target", True),
    RunOption("python", "--python", True, EXECUTABLE),
    RunOption("base_python", "--base-python", True, EXECUTABLE),
    RunOption("candidate_python", "--candidate-python", True, EXECUTABLE),
    RunOption("config", "--config", True),
    RunOption("probe", "--probe", True),
    RunOption("server_arg", "--server-arg", True, ARGUMENTS),
    RunOption("overrides", "--set", True, OVERRIDES),
    RunOption("env_file", "--env-file", True),
    RunOption("env_pip_arg", "--env-pip-arg", True, ARGUMENTS),
    RunOption("store", "--store", False, PATH),
    RunOption("slots", "--slots", False),
    RunOption("parallel", "--parallel", False),
    RunOption("order_from", "--order-from", False, PATHS),
    RunOption("first_per_model", "--first-per-model", False),
    RunOption("env_build_timeout", "--env-build-timeout", False),
    RunOption("baseline", "--baseline", False, PATH),
    RunOption("reproducer_budget", "--reproducer-budget", False),
)


def recorded_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options as results.json keeps them (`metadata.options`), the target as chosen."""
    return {option.dest: option.recorded.record(getattr(args, option.dest)) for option in RUN_OPTIONS}


@dataclass(frozen=True)
class ResumedRun:
    """The revisions of the run `--resume` continues, at the shas it measured."""

    base: Revision
    candidate: Revision
    # The sessions of the run so far, oldest first (RunRequest.earlier_sessions).
    sessions: tuple[dict[str, Any], ...] = ()


def resumed_run(args: argparse.Namespace) -> ResumedRun:
    """Complete `args` with the options of the run in --out: each one not given is the stored
    run's; one given that would change what is compared is exit 2, naming it, so that D is never
    overwritten by another comparison."""
    if args.fresh or args.force:
        raise UsageError(f"--resume and --{'fresh' if args.fresh else 'force'} contradict each other")
    if args.out is None or not run_files(args.out):
        where = "" if args.out is None else f"; {args.out} has none"
        raise UsageError(f"--resume needs --out pointing at an earlier run's directory (one with {RESULTS_FILE}){where}")
    earlier = read_run(args.out)
    stored = earlier.metadata.get("options")
    if not isinstance(stored, dict):
        raise UsageError(f"--resume: the run in {args.out} does not record its options (written by an older "
                         f"detcheck: {earlier.metadata.get('command', 'no command recorded')}); "
                         f"run it again with --force")
    stored = {**stored, "target": earlier.target}  # as the run chose it, not chosen again
    check_recorded_programs(args, stored)
    for option in RUN_OPTIONS:
        given = getattr(args, option.dest)
        value = stored.get(option.dest, args.option_defaults[option.dest])
        if given == args.option_defaults[option.dest]:
            if isinstance(value, list) and any(REDACTED in str(item) for item in value):
                raise UsageError(f"--resume: the run in {args.out} was given a secret in {option.flag}, which "
                                 f"results.json never keeps: give {option.flag} again as the run had it "
                                 f"({shown(value)})")
            setattr(args, option.dest, option.recorded.restore(value))
        elif option.measured and option.recorded.key(option.recorded.record(given)) != option.recorded.key(value):
            raise differs(args.out, option.flag, given, value)
    sessions = earlier.metadata.get("sessions")
    if not isinstance(sessions, list):  # the run's first session
        sessions = [{"command": earlier.metadata.get("command", ""), "launches": len(earlier.launches)}]
    base, candidate = (resumed_revision(args.out, args.repo, flag, getattr(args, dest), info)
                       for dest, flag, info in (("base", "--base", earlier.base),
                                                ("candidate", "--candidate", earlier.candidate)))
    return ResumedRun(base, candidate, tuple(sessions))


# What a resumed run would run that the stored run chose: the servers' interpreters, what pip
# installs into a revision's environment, the servers' own arguments.
PROGRAM_OPTIONS = ("python", "base_python", "candidate_python", "env_pip_arg", "server_arg")


def check_recorded_programs(args: argparse.Namespace, stored: dict[str, Any]) -> None:
    """Say what of the programs `--resume` would run the stored run records (a results.json may
    come from elsewhere), and refuse each that this run, as given, would not run (an option left
    out is this run's default), unless given again as recorded or `--trust-recorded`."""
    options = [option for option in RUN_OPTIONS if option.dest in PROGRAM_OPTIONS]
    recorded = [(option, stored.get(option.dest)) for option in options]
    recorded = [(option, value) for option, value in recorded if value not in (None, [])]
    if not recorded:
        return
    print(f"detcheck: --resume: the run in {args.out} records "
          + " ".join(shlex.join(as_given(option, value)) for option, value in recorded), file=sys.stderr)
    # A value holding a secret results.json never kept must be given again anyway (resumed_run says so).
    differing = [(option, value) for option, value in recorded if not args.trust_recorded and REDACTED not in str(value)
                 and option.recorded.key(option.recorded.record(getattr(args, option.dest))) != option.recorded.key(value)]
    if differing:
        this_run = {"python": "this detcheck's interpreter", "base_python": "none", "candidate_python": "none"}
        raise UsageError(f"--resume: the run in {args.out} ran with "
                         + ", ".join(f"{shlex.join(as_given(option, value))} (this run: "
                                     f"{this_run.get(option.dest) or shown(getattr(args, option.dest))})"
                                     for option, value in differing)
                         + "; give each again as recorded, or pass --trust-recorded to run what the run records")


def resume_command(out: Path, options: dict[str, Any]) -> str:
    """The command that continues an interrupted run: `--resume --out D`, with the programs the
    run records given again as recorded (a resume runs none unasked: check_recorded_programs)."""
    words = ["detcheck", "run", "--resume", "--out", str(out)]
    for option in RUN_OPTIONS:
        if option.dest in PROGRAM_OPTIONS:
            words += as_given(option, options.get(option.dest))
    return shlex.join(words)


def as_given(option: RunOption, value: Any) -> list[str]:
    """A recorded option's value as the words that give it again (`--server-arg=--page-size`)."""
    return [f"{option.flag}={item}" for item in (value if isinstance(value, list) else [value] if value else [])]


def resumed_revision(out: Path, repo: Path | None, flag: str, given: str | None, stored: RevisionInfo) -> Revision:
    """The side's revision at the sha the run measured, named by the ref it was given as (a
    branch that moved since is not followed); a ref given with --resume must be at that sha."""
    if stored.sha is None:
        if given is not None:
            raise differs(out, flag, given, "the installed package")
        return Revision.installed(stored.ref)
    if repo is None:
        raise UsageError(f"--resume: the run in {out} measured {stored.ref} of a repository it does not "
                         f"record: give --repo")
    revision = dataclasses.replace(Revision.resolve(repo, stored.sha), ref=stored.ref)
    if given is not None and (at := Revision.resolve(repo, given)).sha != stored.sha:
        raise differs(out, flag, f"{given} (at {at.short()})", f"{stored.ref} at {revision.short()}")
    return revision


def differs(out: Path, flag: str, given: Any, stored: Any) -> UsageError:
    return UsageError(f"--resume: {flag} {shown(given)} is not what the run in {out} compared ({shown(stored)}); "
                      f"leave {flag} out to continue that run, or pass another --out")


def shown(value: Any) -> str:
    """An option's value as the command line spells it (a repeated option's values in turn)."""
    if value is None or value == []:
        return "none"
    return shlex.join(map(str, value)) if isinstance(value, list) else str(value)
