"""Shared fixtures: an isolated cache dir per test, the project root, a CLI runner, and git
repositories whose python/sglang/launch_server.py hands over to a fixture server."""

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


def detcheck_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args]


def detcheck(*args: str, env: dict | None = None, timeout: float = 600,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI as a real process, as a user would."""
    return subprocess.run(detcheck_argv(*args), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env={**os.environ, **(env or {})})


SHIM = '''import runpy, sys
sys.argv[0] = "sglang.launch_server"
runpy.run_module("{module}", run_name="__main__")
'''


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def make_sglang_repo(root: Path, module: str = "refserver") -> Path:
    """Two commits (main~1, main) of a repo whose `sglang.launch_server` runs `module`, which
    the server finds on PYTHONPATH (e.g. <project>/fixtures)."""
    repo = root / "sglang"
    (repo / "python" / "sglang").mkdir(parents=True)
    (repo / "python" / "sglang" / "__init__.py").write_text('__version__ = "shim"\n')
    (repo / "python" / "sglang" / "launch_server.py").write_text(SHIM.format(module=module))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "commit", "-q", "--allow-empty", "-m", "candidate")
    return repo


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
