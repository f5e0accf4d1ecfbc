"""Interpreter metadata: torch's build facts are read from its version.py, never by importing it."""

from __future__ import annotations

import os
import sys

from harness.metadata import _TORCH_PROBE, _run_probe


def test_torch_facts_come_from_version_py_without_importing_torch(tmp_path):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    # Importing this package would fail loudly: the probe must only read version.py.
    (pkg / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    (pkg / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                    "debug = False\ncuda: Optional[str] = '13.0'\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    assert _run_probe(sys.executable, _TORCH_PROBE, env) == {"torch": "2.11.0+cu130", "cuda": "13.0"}

