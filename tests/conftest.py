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


def _gpu_skip_reason() -> str | None:
    """Why tests marked `gpu` cannot run here, or None when SGLang and a CUDA GPU are present."""
    import importlib.util
    import shutil

    if shutil.which("nvidia-smi") is None:
        return "needs a CUDA GPU (no nvidia-smi on this machine)"
    if importlib.util.find_spec("sglang") is None:
        return "needs SGLang importable (see results/h200/setup.sh for the offline kit)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
