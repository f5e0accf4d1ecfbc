"""nox sessions: validate(<entry>) per matrix.toml entry, plus tests, demo, lint, typecheck, bench.

    nox                                         tests, demo, lint, typecheck
    nox -l --json -t matrix                     the hardware matrix for CI, one session per job with
                                                its runner label and est_time (validate sessions are
                                                not default, so a bare `nox -l` marks them skipped)
    nox -s "validate(h200x1)" -- --repo ../sglang --base main --candidate HEAD [--python PY] [--baseline F]

Sessions run in the current environment (the harness installed with its test extra): the
GPU machines have no network to build virtualenvs from. A validate session on a machine
without the entry's GPUs is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness.demo import SCENARIOS  # noqa: E402  (standard library + harness only)
from harness.matrix import gpu_names, load_matrix  # noqa: E402

nox.options.default_venv_backend = "none"
PY = sys.executable
MATRIX = load_matrix(ROOT / "matrix.toml")
USAGE = 'nox -s "validate(<entry>)" -- --repo PATH --base REF --candidate REF [--python PYTHON] [--junit-xml FILE] [--baseline FILE]'


@nox.session(default=False)
@nox.parametrize(("entry", "partition", "runner", "est_time"), [
    # One session per CI job: an entry, or one partition of its suites (`partitions` in matrix.toml).
    # `nox -l --json -t matrix` carries each one's runner label and estimated seconds in its
    # call_spec: ci/github_matrix.py packs them into runners by estimated time.
    nox.param(e.name, part, e.runner_label, est, id=job,
              tags=["matrix", "gpu" if e.gpus and not e.modelled else "cpu", *([e.target] if e.target else []),
                    f"runner:{e.runner_label}"])
    for e in MATRIX.entries for job, part, est in e.jobs()
])
def validate(session: nox.Session, entry: str, partition: int, runner: str, est_time: float | None) -> None:
    """Base vs candidate over every suite of one matrix.toml entry (or one partition of them)."""
    reason = MATRIX.entry(entry).missing(gpu_names())
    if reason:
        session.skip(reason)
    if not session.posargs:
        session.error(f"which revisions? {USAGE}")
    part = ["--partition", str(partition)] if partition else []
    session.run(PY, "-m", "harness.cli", "matrix", "run", entry, *part, "--no-progress", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """pytest: unit and end-to-end tests against the reference server."""
    session.run(PY, "-m", "pytest", *(session.posargs or ["-q"]))


@nox.session
@nox.parametrize("scenario", sorted([*SCENARIOS, "bisect"]))
def demo(session: nox.Session, scenario: str) -> None:
    """detcheck demo: catch a planted regression on the CPU reference server."""
    session.run(PY, "-m", "harness.cli", "demo", "--scenario", scenario, "--no-progress")


def require(session: nox.Session, module: str) -> None:
    """Fail the session, saying how to install it, when `module` (a tool of the test extra) is missing:
    sessions run in this environment, where nothing can be installed on the GPU machines."""
    if importlib.util.find_spec(module) is None:
        session.error(f"{module} is not installed: .venv/bin/pip install -e '.[test]' -c constraints/cpu.txt")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check under pyproject.toml's [tool.ruff] (fails when ruff is not installed)."""
    require(session, "ruff")
    session.run(PY, "-m", "ruff", "check", "harness", "tests", "benchmarks", "fixtures", "ci", "tools", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over harness/ under pyproject.toml's [tool.mypy] (tests/test_typecheck.py runs it too)."""
    require(session, "mypy")
    session.run(PY, "-m", "mypy", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Print the harness's figures: launches, overhead, cached re-run, server slots, KL maths, bisect steps,
    the A/A false-different rate per placement mode."""
    session.run(PY, str(ROOT / "benchmarks" / "run_all.py"), *session.posargs)
