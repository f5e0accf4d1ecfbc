"""The servers' interpreter is checked before anything starts: an SGLang checkout whose
`launch_server --help` imports a module the interpreter lacks is one line and exit 2, not an
error in every cell after the launches."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import detcheck, git, refserver_suite
from harness.interpreters import library_failure, missing_import

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


# A compiled extension that cannot load: `PyInit_fakekernel` reads a symbol nothing defines (as
# sgl_kernel's `.so`, built against torch 2.14.1, reads one that torch 2.13's libraries lack).
FAKE_KERNEL_C = """extern int _ZN3c104cuda20torch_2_14_only_hookEv;
void *PyInit_fakekernel(void) { return (void *)&_ZN3c104cuda20torch_2_14_only_hookEv; }
"""


def torch_2_13_environment(root: Path) -> Path:
    """A venv whose torch says 2.13.0 and whose `fakekernel` extension has an undefined symbol."""
    venv = root / "env-torch-2.13"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text('__version__ = "2.13.0"\ncuda = "12.9"\n')
    source = root / "fakekernel.c"
    source.write_text(FAKE_KERNEL_C)
    suffix = subprocess.run([str(venv / "bin" / "python"), "-c",
                             "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(site / f"fakekernel{suffix}"), str(source)], check=True)
    return venv / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the extension that cannot load")
def test_a_compiled_library_the_interpreter_cannot_load_is_one_line_naming_library_symbol_and_option(tmp_path):
    """The base's launch_server imports nothing compiled; the candidate's (a 0.5.22 pinning torch
    2.14.1) imports the extension: the check reads each side, and the one line names the
    interpreter's torch, the library, its symbol, the pin and --candidate-python."""
    repo = stand_in_sglang(tmp_path, "json")
    (repo / "python" / "pyproject.toml").write_text('[project]\ndependencies = ["torch==2.14.1"]\n')
    (repo / "python" / "sglang" / "launch_server.py").write_text(LAUNCH_SERVER.format(module="fakekernel"))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "v0.5.22")
    python = torch_2_13_environment(tmp_path)
    suite = refserver_suite(tmp_path / "suite.toml", ["kl"], targets=("sglang",))
    proc = detcheck("run", "--repo", str(repo), "--base", "main~1", "--candidate", "main", "--suite", str(suite),
                    "--out", str(tmp_path / "out"), "--python", str(python), "--no-progress", "--format", "json",
                    env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}, timeout=300)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True).stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("detcheck: error:")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    library = next(python.parent.parent.glob("lib/python3*/site-packages/fakekernel*.so"))
    symbol = "_ZN3c104cuda20torch_2_14_only_hookEv"
    readable = " (c10::cuda::torch_2_14_only_hook())" if shutil.which("c++filt") else ""
    assert errors == [f"detcheck: error: the servers' interpreter (--python {python}, torch 2.13.0) cannot load "
                      f"the compiled library {library}: undefined symbol {symbol}{readable}, which "
                      f"`sglang.launch_server --help` of candidate (main at {sha[:12]}) needs: an environment "
                      f"built for another torch or SGLang release than this revision's; the candidate pins "
                      f"torch==2.14.1; pass --candidate-python with the python of an environment built for "
                      f"torch 2.14.1 (each side may have its own: --base-python, --candidate-python)"], proc.stderr
    assert not (tmp_path / "out" / "logs").exists()  # nothing launched


@pytest.mark.parametrize("output, library, package, symbol", [
    ("ImportError: /v/lib/python3.12/site-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c10x",
     "/v/lib/python3.12/site-packages/sgl_kernel/common_ops.abi3.so", "sgl_kernel", "_ZN3c10x"),
    ("OSError: /v/lib/python3.12/dist-packages/flashinfer/data/libfi.so: undefined symbol: cuLaunch",
     "/v/lib/python3.12/dist-packages/flashinfer/data/libfi.so", "flashinfer", "cuLaunch"),
    ("OSError: libcudart.so.13: cannot open shared object file: No such file or directory",
     "libcudart.so.13", None, None),
])
def test_a_library_the_loader_refused_is_read_from_the_last_exception(output, library, package, symbol):
    failure = library_failure("Traceback (most recent call last):\n  ...\n" + output)
    assert failure is not None
    assert (failure.library, failure.package, failure.symbol) == (library, package, symbol)


def test_an_import_failure_without_a_library_is_no_library_failure():
    assert library_failure("ImportError: cannot import name 'ops' from 'sgl_kernel'") is None
    assert library_failure("RuntimeError: CUDA unavailable") is None
