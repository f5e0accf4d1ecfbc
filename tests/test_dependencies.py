"""Dependencies that never fight SGLang's: the harness needs no torch, the extras ask only for a
floor, so that an SGLang environment keeps its own torch, and the README's commands take the
pinned CPU build through the constraints file they name (tests/test_run_e2e.py checks that no
harness module imports torch)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The torch of SGLang 0.5.22+: another version than the CPU build constraints/cpu.txt pins.
SGLANG_TORCH = "2.14.1"
_NAME_AND_FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*(?:>=\s*([0-9][^,;\s]*))?")


def requirements(*extras: str) -> list[str]:
    return [*PROJECT["dependencies"], *(r for extra in extras for r in PROJECT["optional-dependencies"][extra])]


def test_the_harness_installs_without_torch_and_the_extras_take_any_torch_from_their_floor():
    assert not [r for r in PROJECT["dependencies"] if r.startswith("torch")]
    torch = {r for extra in PROJECT["optional-dependencies"].values() for r in extra if r.startswith("torch")}
    assert torch == {"torch>=2.4"}


def test_the_readme_commands_and_ci_take_the_cpu_build_through_the_constraints_file():
    assert "torch==2.13.0" in (ROOT / "constraints" / "cpu.txt").read_text().splitlines()
    commands = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1).splitlines()
    assert all(" -c constraints/cpu.txt " in command for command in commands)
    assert commands[1] in (ROOT / ".ci" / "run").read_text().splitlines()  # CI runs the README's test command


def fake_environment(root: Path, versions: dict[str, str]) -> str:
    """A venv (no pip of its own) in which each named distribution is installed at its version,
    as far as pip can tell (a dist-info with METADATA, no files): an SGLang environment stand-in."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name, version in versions.items():
        dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (dist / "INSTALLER").write_text("pip\n")
    return str(python)


def planned_installs(python: str, wanted: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`pip install --dry-run --report` of `wanted` into `python`'s environment, from an empty
    folder of wheels: nothing is downloaded, and anything pip would have to install fails it."""
    (tmp_path / "no-wheels").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "pip", "--isolated", "--python", python, "install", "--dry-run",
                           "--quiet", "--report", str(tmp_path / "report.json"), "--no-index",
                           "--find-links", str(tmp_path / "no-wheels"), *wanted],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # pip resolves in a process of its own
def test_an_sglang_environment_with_another_torch_keeps_it(tmp_path):
    wanted = requirements("refserver", "model-tools", "test")
    versions = {}
    for requirement in wanted:
        name, floor = _NAME_AND_FLOOR.match(requirement).groups()
        versions[name] = floor or "1.0"
    versions["torch"] = SGLANG_TORCH
    python = fake_environment(tmp_path / "sglang-env", versions)
    kept = planned_installs(python, wanted, tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert json.loads((tmp_path / "report.json").read_text())["install"] == []  # torch 2.14.1 stays
    # The stand-in can fail: a pin the environment does not hold is something pip must install.
    pinned = planned_installs(python, ["torch==2.13.0"], tmp_path)
    assert pinned.returncode != 0 and "torch==2.13.0" in pinned.stderr, pinned.stderr


def test_every_runtime_dependency_is_imported_by_the_harness():
    """A dependency no harness module imports is an install every user pays for nothing
    (`requests` was one: only a test helper posts with it, so it is in the test extra)."""
    import ast

    imported = set()
    for module in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    names = [_NAME_AND_FLOOR.match(r).group(1).lower().replace("-", "_") for r in PROJECT["dependencies"]]
    assert [name for name in names if name not in imported] == []


def test_python_dash_m_detcheck_is_the_command():
    """For an environment whose scripts are not on PATH (a venv not activated, a CI step)."""
    proc = subprocess.run([sys.executable, "-m", "detcheck", "--version"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert (proc.returncode, proc.stdout.split()[0]) == (0, "detcheck"), proc.stderr
