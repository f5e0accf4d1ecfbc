"""Shared fixtures: an isolated cache dir per test, the project root, a CLI runner, git
repositories whose python/sglang/launch_server.py hands over to a fixture server, a bare
interpreter, and the check that no process a test started outlives it."""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session", autouse=True)
def worker_dirs(tmp_path_factory):
    """Caches of this test process (an xdist worker's own under `-n`; its basetemp is per worker)
    and of every process it starts: matplotlib's font list and config, and whatever else keeps
    its cache under $XDG_CACHE_HOME, so parallel workers never write one file."""
    root = tmp_path_factory.getbasetemp()
    with pytest.MonkeyPatch.context() as patch:
        for name, sub in (("XDG_CACHE_HOME", "xdg-cache"), ("MPLCONFIGDIR", "matplotlib")):
            (root / sub).mkdir(exist_ok=True)
            patch.setenv(name, str(root / sub))
        yield root


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


def refserver_suite(path: Path, probes: list[str], tables: str = "", *, config: str = "det",
                    deterministic: bool = True, prompts: int = 2, prompt_len: tuple[int, int] = (12, 16),
                    output_len: int = 4, args: tuple[str, ...] = (),
                    targets: tuple[str, ...] = ("refserver",)) -> Path:
    """A one-configuration suite on the reference server's hybrid model (the model of each of
    `targets`), written to `path`; `tables` holds its [probe.<name>] tables."""
    models = "".join(f'{target} = "{ROOT / "fixtures/refmodels/hybrid"}"\n' for target in targets)
    path.write_text(f"""name = "{path.stem}"
[models]
{models}[server]
args = {json.dumps(list(args))}
[workload]
prompts = {prompts}
prompt_len = {json.dumps(list(prompt_len))}
output_len = {output_len}
[[config]]
name = "{config}"
deterministic = {json.dumps(deterministic)}
probes = {json.dumps(probes)}
{tables}""")
    return path


def planted(tmp_path: Path, regression: str):
    """A reference-server repository whose head plants `regression` on the base: (repo, base sha,
    candidate sha)."""
    from harness.fixture_repo import FixtureRepo

    repo = FixtureRepo.create(tmp_path / "repo")
    base = repo.head()
    repo.edit(regression)
    return repo, base, repo.commit(f"plant {regression}")


def run_pair(repo, base: str, candidate: str, suite: Path, out: Path, *extra: str, env: dict | None = None):
    """`detcheck run` of base vs candidate as a process: (exit code, results.json, the process)."""
    proc = detcheck("run", "--repo", str(repo.path), "--base", base, "--candidate", candidate,
                    "--suite", str(suite), "--out", str(out), "--no-progress", "--format", "md", *extra,
                    timeout=900, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads((out / "results.json").read_text()), proc


# The H200 seed suite (issue 38) as the reference server runs it: its workload (8 prompts of 150-700
# tokens from a 32,000-token vocabulary, 48 new tokens) CPU-sized, the reference models having 512
# tokens; prompts stay longer than the track interval (64), so that every hit restores a checkpoint.
SEED_UNIFIED = ROOT / "suites/h200/seed-unified.toml"
SEED_UNIFIED_CPU_WORKLOAD = {"prompts = 8": "prompts = 3", "prompt_len = [150, 700]": "prompt_len = [70, 200]",
                             "output_len = 48": "output_len = 8", "vocab = 32000": "vocab = 500"}


def seed_unified_cpu_suite(path: Path) -> Path:
    """suites/h200/seed-unified.toml written to `path` for the reference server. It names the
    H200's seeded Inkling (.models/, written by `detcheck make-model`), whose config.json loading
    checks: the fixture's stands in for it."""
    text = SEED_UNIFIED.read_text().replace('"../../.models/', '"../../fixtures/models/').replace('"../../', f'"{ROOT}/')
    for h200, cpu in SEED_UNIFIED_CPU_WORKLOAD.items():
        assert h200 in text, h200  # the H200 suite still has the workload this rehearsal shrinks
        text = text.replace(h200, cpu, 1)
    path.write_text(text)
    return path


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


# Every process a test starts inherits this variable: `tagged` finds the ones still alive however
# they were started (in the server's process group or not).
TAG = "DETCHECK_TEST_TAG"


def tagged(tag: str) -> list[psutil.Process]:
    """Live processes (zombies count as gone) whose environment carries `tag`."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(TAG) == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def leftovers(tag: str, wait_s: float = 3.0) -> list[str]:
    """Processes of `tag` still alive after `wait_s` (then killed, so one leak stays one failure)."""
    _, alive = psutil.wait_procs(tagged(tag), timeout=wait_s)
    described = []
    for proc in alive:
        try:
            described.append(f"{proc.pid}: {' '.join(proc.cmdline())[:200]}")
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    return described


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> str:
    """An interpreter with the standard library only: the fault server needs nothing more, and
    the harness's per-revision metadata probe then skips importing torch."""
    venv = tmp_path_factory.mktemp("bare-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return str(venv / "bin" / "python")


@pytest.fixture
def no_leftovers(monkeypatch) -> str:
    """Tag the test's processes; after the test, none may be alive."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG, tag)
    yield tag
    left = leftovers(tag)
    assert not left, f"processes outlived the test: {left}"


def fake_gpus(bin_dir: Path, names: list[str], visible: str | None = None) -> dict[str, str]:
    """The environment of a machine whose `nvidia-smi` lists `names` (a script first on PATH),
    with CUDA_VISIBLE_DEVICES set to `visible` (None: as all GPUs, unset)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    names_only = "".join(f"echo {json.dumps(name)}\n" for name in names)
    described = "".join(f"echo {json.dumps(name + ', 550.00, 143771 MiB')}\n" for name in names)
    (bin_dir / "nvidia-smi").write_text(  # as the two queries detcheck makes are answered
        f'#!/bin/sh\nif [ "$1" = --query-gpu=name ]; then\n:\n{names_only}else\n:\n{described}fi\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return {**env, "CUDA_VISIBLE_DEVICES": visible} if visible is not None else env


def _gpu_skip_reason() -> str | None:
    """Why tests marked `gpu` cannot run here, or None when SGLang and a CUDA GPU are present."""
    import importlib.util
    import shutil

    if shutil.which("nvidia-smi") is None:
        return "needs a CUDA GPU (no nvidia-smi on this machine)"
    if importlib.util.find_spec("sglang") is None:
        return "needs SGLang importable (see tools/gpu/gpu-run.sh for the offline kit)"
    return None


# A fixture of these scopes is shared by the tests of a module (or of a class in it), and built on
# every worker that runs one of them: under pytest-xdist (`-n N`) the tests of a module that share
# one run on one worker, so that an expensive shared fixture (servers, a history of commits, a
# run) is built once.
SHARED_SCOPES = ("class", "module", "package")


def _fixture_call(node: ast.FunctionDef) -> ast.expr | None:
    """The function's @pytest.fixture decorator (a call or the bare name), if it has one."""
    for deco in node.decorator_list:
        func = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(func) in ("pytest.fixture", "fixture"):
            return deco
    return None


def _used_fixtures(node: ast.FunctionDef) -> set[str]:
    """The fixtures a function names: its parameters and its @pytest.mark.usefixtures."""
    names = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    for deco in node.decorator_list:
        if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("usefixtures"):
            names |= {a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names


@functools.cache
def sharing_tests(module: Path) -> frozenset[str]:
    """The test functions of the module at `module` that use a fixture of a SHARED_SCOPES scope
    it defines (directly, or through another of its fixtures); `{"*"}`, all of them, when such a
    fixture is autouse or the module cannot be read."""
    try:
        tree = ast.parse(module.read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset({"*"})
    uses: dict[str, set[str]] = {}  # a fixture's name -> the fixtures it uses
    shared: set[str] = set()
    tests: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        deco = _fixture_call(node)
        if deco is None:
            if node.name.startswith("test"):
                tests[node.name] = _used_fixtures(node)
            continue
        keywords = {k.arg: k.value.value for k in getattr(deco, "keywords", [])
                    if isinstance(k.value, ast.Constant)}
        name = keywords.get("name") or node.name
        uses[name] = _used_fixtures(node)
        if keywords.get("scope") in SHARED_SCOPES:
            if keywords.get("autouse"):
                return frozenset({"*"})
            shared.add(name)
    grew = True
    while grew:  # a fixture that uses a shared one shares it too
        grew = False
        for name, used in uses.items():
            if name not in shared and used & shared:
                shared.add(name)
                grew = True
    return frozenset(test for test, used in tests.items() if used & shared)


def shared_fixture_scope(rootpath: Path, nodeid: str) -> str:
    """A test's unit of distribution: its module, for a test sharing a fixture of its module with
    others (sharing_tests); else the test itself."""
    module, _, rest = nodeid.partition("::")
    function = rest.rsplit("::", 1)[-1].split("[", 1)[0]
    sharing = sharing_tests(rootpath / module)
    return module if "*" in sharing or function in sharing else nodeid


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # pytest-xdist's hook; before its own `load`
def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's `load`): every test goes to whichever worker is free, except that the tests
    that share a module's fixture go to one worker together (handed out first, the largest group
    first: xdist's loadscope order). Another `--dist` is left to xdist. The controller collects
    nothing, so who shares what is read from the modules' source."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_fixture_scope(config.rootpath, nodeid)

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    for item in items:
        # The marker, not a keyword: keywords hold every parent's name too (a checkout in a folder
        # named "gpu" would skip every test).
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
