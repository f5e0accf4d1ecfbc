"""Per-revision environments (harness.envs): the key, the requirements file's names, the build
commands, and real builds from local wheels (offline)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envprobe import write_envprobe_wheel
from harness.envs import (BUILD_LOG, DEFAULT_ENV_FILE, MANIFEST, BaseInterpreter, EnvOptions, RevisionEnv,
                          build_commands, env_key, envs_root, requirement_names, revision_env)
from harness.errors import UsageError
from harness.redaction import REDACTED, redact_command, url_credentials
from harness.results import Role
from harness.revisions import Revision
from harness.jobs import RunRequest
from harness.pipeline.open import revision_envs, role_python

SHA_A, SHA_B = "a" * 40, "b" * 40
BASE = BaseInterpreter(python="/usr/bin/python3", executable="/usr/bin/python3.11", version="3.11.7",
                       prefix="/usr", venv_site_dirs=(), has_pip=True)


def tree_with(path: Path, requirements: str, **other_files: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / DEFAULT_ENV_FILE).write_text(requirements)
    for name, text in other_files.items():
        (path / name).write_text(text)
    return path


# -- the key ----------------------------------------------------------------------------------

def test_the_key_follows_the_file_content_and_the_sha_not_other_files(tmp_path):
    tree = tree_with(tmp_path / "t", "torch==2.13.0\n", **{"README.md": "one"})
    key = env_key(SHA_A, tree / DEFAULT_ENV_FILE, BASE)
    (tree / "README.md").write_text("two")
    (tree / "setup.py").write_text("unrelated")
    assert env_key(SHA_A, tree / DEFAULT_ENV_FILE, BASE) == key
    assert env_key(SHA_B, tree / DEFAULT_ENV_FILE, BASE) != key
    (tree / DEFAULT_ENV_FILE).write_text("torch==2.14.0\n")
    changed = env_key(SHA_A, tree / DEFAULT_ENV_FILE, BASE)
    assert changed.file_sha256 != key.file_sha256 and changed.name != key.name


def test_the_key_follows_the_base_interpreter(tmp_path):
    tree = tree_with(tmp_path / "t", "torch\n")
    other = BaseInterpreter(BASE.python, BASE.executable, "3.11.8", BASE.prefix, (), True)
    assert env_key(SHA_A, tree / DEFAULT_ENV_FILE, other) != env_key(SHA_A, tree / DEFAULT_ENV_FILE, BASE)


def test_a_revision_without_the_file_has_no_environment(tmp_path):
    (tmp_path / "t").mkdir()
    assert revision_env(SHA_A, tmp_path / "t", EnvOptions(), sys.executable) is None
    assert revision_env(None, None, EnvOptions(), sys.executable) is None
    assert not envs_root().exists()


@pytest.mark.parametrize("rel", ["/etc/requirements.txt", "../requirements.txt", "a/../../r.txt", ""])
def test_the_env_file_must_lie_inside_the_tree(rel):
    with pytest.raises(UsageError, match="--env-file"):
        EnvOptions(rel)


# -- what the file names, how it is built --------------------------------------------------------

def test_requirement_names_are_the_projects_the_file_pins(tmp_path):
    tree = tree_with(tmp_path / "t", "\n".join([
        "# kernels", "sgl-kernel==0.3.9  # the one that matters", "torch>=2.13; python_version>'3.10'",
        "flashinfer-python[jit] @ https://example.com/f.whl", "--find-links /wheels", "-e .",
        "./local-pkg", "https://example.com/x.whl", "torch==2.13.0", ""]))
    assert requirement_names(tree / DEFAULT_ENV_FILE) == ["sgl-kernel", "torch", "flashinfer-python"]


def test_without_uv_the_environment_borrows_the_base_pip_and_installs_the_file(tmp_path):
    steps = dict(build_commands(tmp_path / "e", tmp_path / "req.txt", BASE, ("--no-index",), uv=None))
    assert steps["venv"] == ["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip",
                             str(tmp_path / "e")]
    assert steps["pip install"][:3] == [str(tmp_path / "e" / "bin" / "python"), "-m", "pip"]
    assert steps["pip install"][-3:] == ["-r", str(tmp_path / "req.txt"), "--no-index"]
    no_pip = BaseInterpreter(BASE.python, BASE.executable, BASE.version, BASE.prefix, (), has_pip=False)
    assert "--without-pip" not in dict(build_commands(tmp_path / "e", tmp_path / "r", no_pip, (), None))["venv"]


def test_with_uv_both_steps_are_uv(tmp_path):
    steps = dict(build_commands(tmp_path / "e", tmp_path / "req.txt", BASE, ("--no-index",), uv="/bin/uv"))
    assert steps["uv venv"][:3] == ["/bin/uv", "venv", "--system-site-packages"]
    assert steps["uv pip install"][-3:] == ["-r", str(tmp_path / "req.txt"), "--no-index"]


def test_index_credentials_are_masked_in_the_recorded_command():
    argv = ["detcheck", "run", "--env-pip-arg=--index-url=https://me:s3cret-tok@pypi.example/simple"]
    assert url_credentials(argv) == ("me:s3cret-tok",)
    assert url_credentials(["git+ssh://git@github.com/org/repo"]) == ()  # a user name, not a secret
    assert redact_command(argv)[-1] == f"--env-pip-arg=--index-url=https://{REDACTED}@pypi.example/simple"


# -- real builds (venv + pip, offline from local wheels) ------------------------------------------

@pytest.fixture
def wheels(tmp_path) -> Path:
    for version in ("1.0", "2.0"):
        write_envprobe_wheel(tmp_path / "wheels", version)
    return tmp_path / "wheels"


def offline(wheels: Path) -> EnvOptions:
    return EnvOptions(pip_args=("--no-index", f"--find-links={wheels}"))


@pytest.mark.slow
def test_an_environment_is_built_once_and_imports_its_own_version(tmp_path, wheels):
    tree = tree_with(tmp_path / "t", "detcheck_envprobe==2.0\n")
    env = revision_env(SHA_A, tree, offline(wheels), sys.executable)
    assert not env.error and env.packages == {"detcheck_envprobe": "2.0"}
    assert env.path.is_symlink() and (env.path / BUILD_LOG).is_file()
    # The interpreter that ran the harness lends its packages (here, the harness's own venv).
    code = "import detcheck_envprobe, requests; print(detcheck_envprobe.__version__)"
    assert subprocess.run([env.python, "-c", code], capture_output=True, text=True).stdout.strip() == "2.0"
    built = (env.path.resolve().stat().st_ino, json.loads((env.path / MANIFEST).read_text())["built_at"])
    again = revision_env(SHA_A, tree, offline(wheels), sys.executable)
    assert again == env
    assert (again.path.resolve().stat().st_ino, json.loads((again.path / MANIFEST).read_text())["built_at"]) == built
    # Its directory removed behind the cache's back: the dangling name is rebuilt, not used.
    shutil.rmtree(env.path.resolve())
    rebuilt = revision_env(SHA_A, tree, offline(wheels), sys.executable)
    assert rebuilt.packages == {"detcheck_envprobe": "2.0"} and (rebuilt.path / MANIFEST).is_file()


@pytest.mark.slow
def test_an_interrupted_build_is_removed_and_a_failed_one_leaves_nothing(tmp_path, wheels):
    tree = tree_with(tmp_path / "t", "detcheck_envprobe==9.9\n")
    key = env_key(SHA_A, tree / DEFAULT_ENV_FILE, BaseInterpreter.inspect(sys.executable), offline(wheels).pip_args)
    half_built = envs_root() / f"{key.name}.4242"
    (half_built / "bin").mkdir(parents=True)  # a build killed before its manifest was written
    env = revision_env(SHA_A, tree, offline(wheels), sys.executable)
    assert env.error.startswith("pip install exit 1")
    assert "No matching distribution found for detcheck_envprobe==9.9" in env.error
    assert [p.name for p in envs_root().iterdir() if p.is_dir() or p.is_symlink()] == []


# -- which interpreter a role runs on ---------------------------------------------------------

def request(tmp_path: Path, **kw) -> RunRequest:
    return RunRequest(suite_path=tmp_path / "s.toml", target="refserver", base=Revision("b", SHA_A),
                      candidate=Revision("c", SHA_B), out_dir=tmp_path / "out", store_root=tmp_path / "store", **kw)


def test_an_explicit_interpreter_wins_over_the_environment_and_nothing_is_built_for_it(tmp_path):
    trees = {Role.BASE: tree_with(tmp_path / "a", "nonexistent-package==1\n"),
             Role.CANDIDATE: tree_with(tmp_path / "b", "nonexistent-package==1\n")}
    req = request(tmp_path, python="/opt/py", role_python={Role.BASE: "/opt/base", Role.CANDIDATE: "/opt/cand"})
    assert revision_envs(req, trees) == {}
    assert not envs_root().exists()
    built = RevisionEnv(DEFAULT_ENV_FILE, env_key(SHA_B, trees[Role.CANDIDATE] / DEFAULT_ENV_FILE, BASE),
                        tmp_path / "env")
    assert role_python(req, {Role.CANDIDATE: built}, Role.CANDIDATE) == "/opt/cand"
    only_base = request(tmp_path, python="/opt/py", role_python={Role.BASE: "/opt/base"})
    assert role_python(only_base, {Role.CANDIDATE: built}, Role.CANDIDATE) == str(tmp_path / "env" / "bin" / "python")
    assert role_python(request(tmp_path, python="/opt/py"), {}, Role.BASE) == "/opt/py"


def test_an_env_file_no_revision_has_is_warned_about(tmp_path, capsys):
    trees = {Role.BASE: tmp_path, Role.CANDIDATE: tmp_path}
    assert revision_envs(request(tmp_path, env_options=EnvOptions("requirements/gpu.txt")), trees) == {}
    assert "--env-file requirements/gpu.txt: no revision has it" in capsys.readouterr().err
