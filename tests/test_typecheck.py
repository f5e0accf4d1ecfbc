"""The type check CI runs: mypy over harness/ under pyproject.toml's [tool.mypy] (what it checks,
and how strictly, is said there), clean. A test rather than a line in .ci/run, so that README.md's
test command stays everything CI runs; `nox -s typecheck` runs the same check on its own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from conftest import ROOT


def test_harness_type_checks_clean():
    """In mypy's own cache (.mypy_cache, as `nox -s typecheck` and a plain `mypy` keep it): a
    cold check takes 25 s of CPU, one over what changed since, seconds; mypy's incremental mode
    checks again every module whose source, or whose dependencies' interface, changed."""
    assert importlib.util.find_spec("mypy"), "mypy is not installed: pip install -e '.[test]' -c constraints/cpu.txt"
    proc = subprocess.run([sys.executable, "-m", "mypy"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, f"mypy found type errors:\n{proc.stdout}{proc.stderr}"
