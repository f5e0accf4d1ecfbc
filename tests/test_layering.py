"""The module layering of ARCHITECTURE.md, checked: what noxfile.py imports runs in a bare
interpreter, and commands never import one another."""

from __future__ import annotations

import ast
import subprocess

from conftest import ROOT

STDLIB_ONLY = ("harness.paths", "harness.errors", "harness.redaction", "harness.gitcmd",
               "harness.targets", "harness.plan", "harness.matrix", "harness.demo")


def test_what_noxfile_imports_needs_only_the_standard_library(bare_python):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); " + "; ".join(f"import {m}" for m in STDLIB_ONLY)
    proc = subprocess.run([bare_python, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_commands_never_import_one_another():
    for path in (ROOT / "harness" / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness.commands"):
                assert node.module == "harness.commands.common_args", (path.name, node.module)
