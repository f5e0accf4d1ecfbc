"""Shared fixtures: an isolated cache dir per test, the project root, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Worktrees, help texts and stored cells of one test never leak into another."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("DETCHECK_CACHE_DIR", str(cache))
    return cache


def detcheck(*args: str, env: dict | None = None, timeout: float = 600,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI as a real process, as a user would."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env={**os.environ, **(env or {})})
