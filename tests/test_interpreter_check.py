"""The servers' interpreter is checked before anything starts: an SGLang checkout whose
`launch_server --help` imports a module the interpreter lacks is one line and exit 2, not an
error in every cell after the launches."""

from __future__ import annotations

import subprocess

import pytest

from conftest import detcheck, git, refserver_suite
from harness.interpreters import missing_import

# A stand-in SGLang checkout: its launch_server imports what the test's bare interpreter lacks.
LAUNCH_SERVER = """import argparse
import {module}

parser = argparse.ArgumentParser()
parser.add_argument("--model-path")
parser.parse_args()
"""


def stand_in_sglang(root, module: str):
    repo = root / "sglang"
    (repo / "python" / "sglang" / "srt").mkdir(parents=True)
    (repo / "python" / "sglang" / "__init__.py").write_text("")
    (repo / "python" / "sglang" / "srt" / "__init__.py").write_text("")
    (repo / "python" / "sglang" / "launch_server.py").write_text(LAUNCH_SERVER.format(module=module))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "v0")
    return repo


def run_on(tmp_path, repo, python: str, *extra: str):
    suite = refserver_suite(tmp_path / "suite.toml", ["kl"], targets=("sglang",))
    return detcheck("run", "--repo", str(repo), "--base", "main", "--candidate", "main", "--suite", str(suite),
                    "--out", str(tmp_path / "out"), "--python", python, "--no-progress", "--format", "json", *extra,
                    timeout=300)


@pytest.mark.slow
def test_an_interpreter_lacking_what_launch_server_imports_is_one_line_before_any_launch(tmp_path, bare_python):
    repo = stand_in_sglang(tmp_path, "orjson_absent_here")
    proc = run_on(tmp_path, repo, bare_python)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True).stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("detcheck: error:")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert errors == [f"detcheck: error: the servers' interpreter (--python {bare_python}) lacks module "
                      f"orjson_absent_here, which `sglang.launch_server --help` of base (main at "
                      f"{sha[:12]}) needs: point --python at the python of your SGLang "
                      f"environment (e.g. --python ~/sglang/.venv/bin/python), or install detcheck into that "
                      f"environment (README.md, \"On your SGLang checkout\")"], proc.stderr
    assert not (tmp_path / "out" / "logs").exists()  # nothing launched


@pytest.mark.slow
def test_a_module_missing_from_the_checkout_itself_stays_each_cells_error(tmp_path, bare_python):
    """The revision's own defect, not the interpreter's: the run goes on and its cells say why."""
    repo = stand_in_sglang(tmp_path, "sglang.srt.not_written_yet")
    proc = run_on(tmp_path, repo, bare_python)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "lacks" not in proc.stderr


@pytest.mark.parametrize("output, lacking", [
    ("Traceback:\n  ...\nModuleNotFoundError: No module named 'orjson'\n", "module orjson"),
    ("ImportError: cannot import name 'ops' from 'sgl_kernel' (/x/sgl_kernel/__init__.py)",
     "cannot import name 'ops' from 'sgl_kernel' (/x/sgl_kernel/__init__.py)"),
    ("ModuleNotFoundError: No module named 'sglang.srt.gone'", None),  # the checkout's own module
    ("ImportError: cannot import name 'x' from 'sglang.srt.utils'", None),
    ("RuntimeError: CUDA unavailable", None),
])
def test_missing_import_reads_the_last_exception_of_help(output, lacking):
    assert missing_import(output, "sglang", from_checkout=True) == lacking


def test_an_installed_sglang_missing_is_the_interpreters_lack():
    assert missing_import("ModuleNotFoundError: No module named 'sglang'", "sglang", from_checkout=False) == "module sglang"
