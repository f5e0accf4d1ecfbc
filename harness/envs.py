"""Per-revision environments: a revision that declares packages of its own runs its servers
from a virtual environment built for it once and cached.

A revision declares its environment in a pip requirements file inside its tree
(`DEFAULT_ENV_FILE`, or `--env-file`); a revision without one runs on the running interpreter.
The environment is keyed by (revision sha, sha256 of the file's bytes, the identity of the
interpreter it is built from, the pip options: another `--find-links` folder is another
environment) and lives under `<cache>/envs/`. The file must lie inside the revision's tree,
links resolved. It is made with
`--system-site-packages`, so the preinstalled stack (torch, CUDA wheels) is inherited and the
file only overrides what differs; where the base interpreter is itself a virtual environment,
its site-packages are inherited too (a `.pth` file), since `--system-site-packages` alone would
reach only the interpreter it was made from.

Building is locked per key (runs share a cache). A virtual environment cannot be moved (pip
writes its absolute path into the scripts it installs), so it is built in a directory of its
own that never moves and published by renaming a symlink onto the key's name: the name is a
complete environment or absent, and an interrupted build is removed by the next one. A build
is published only once every package the file names imports from it (at its pinned version):
pip options that send the install elsewhere (`--target`, `--prefix`, `--root`, `--user`, and
uv's `--python`, `--system`; spelled in full or, as pip takes them, by any prefix) are
refused, and any other way to install nothing is caught by that check. A build has a time limit
(`EnvOptions.build_timeout_s`); past it, its process group is killed. A failed build is
returned with pip's output tail, never cached: the next run tries again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.bounded import INPUT_FILE, TooLarge, read_file, read_file_text
from harness.errors import UsageError
from harness.paths import cache_dir, file_lock
from harness.redaction import environment_secrets, scrub

DEFAULT_ENV_FILE = "detcheck-requirements.txt"
# Written into an environment as the last step of its build: what was built from what.
MANIFEST = "detcheck-env.json"
BUILD_LOG = "detcheck-build.log"
# Links the base virtual environment's site-packages into a new one (see the module docstring).
INHERIT_PTH = "detcheck-inherit.pth"
# Lines of pip's output a failed build's reason keeps: where pip says why.
FAILURE_TAIL_LINES = 25
# A build's time limit unless --env-build-timeout says otherwise: SGLang's own requirements,
# kernels among them, from a cold pip cache.
DEFAULT_BUILD_TIMEOUT_S = 1800.0
# Installer options that install somewhere other than the environment being built: pip's, and
# uv's (`--python` and `--system` choose the environment uv installs into; pip refuses its own
# `--python` after the subcommand).
_RELOCATING_PIP_OPTIONS = ("--target", "--prefix", "--root", "--user", "--python", "--system")
# Their short spellings (pip's -t, uv's -p), and the short options that take no value, which
# may come before one of them in a cluster (`-qt DIR` is -q -t DIR).
_RELOCATING_SHORT_OPTIONS = "tp"
_FLAG_SHORT_OPTIONS = "hvVqUI"
# pip (optparse) takes any unambiguous prefix of a long option, and an exact name before any
# prefix: the options that are themselves a prefix of a relocating one stay allowed.
_OPTIONS_PREFIXING_RELOCATING = ("--pre",)

_BASE_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "version": sys.version,
    "prefix": sys.prefix,
    "in_venv": sys.prefix != sys.base_prefix,
    "site_dirs": list(dict.fromkeys([paths["purelib"], paths["platlib"]])),
    "has_pip": importlib.util.find_spec("pip") is not None,
}))
"""

_VERSIONS_PROBE = r"""
import json, sys
from importlib import metadata
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""

# A requirement line's project name (PEP 508): what comes before extras, markers, versions or `@`.
_REQUIREMENT_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
# What follows the name when it pins one version: `==1.0` (no extras, no other clause).
_EXACT_PIN = re.compile(r"^\s*==\s*([A-Za-z0-9.+!_-]+)\s*(?:;.*)?$")


class EnvBuildError(Exception):
    """An environment could not be built; the message carries pip's (or venv's) output tail."""


@dataclass(frozen=True)
class EnvOptions:
    """How revisions' environments are found and built (`--env-file`, `--env-pip-arg`)."""

    file: str = DEFAULT_ENV_FILE  # relative to the revision's tree
    # Passed to `pip install` as they are: offline machines need `--no-index --find-links DIR`.
    pip_args: tuple[str, ...] = ()
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S

    def __post_init__(self) -> None:
        rel = PurePosixPath(self.file)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise UsageError(f"--env-file {self.file}: must be a path inside the revision's tree "
                             f"(relative, without '..')")
        for arg in self.pip_args:
            relocating = relocating_pip_option(arg)
            if relocating:
                raise UsageError(f"--env-pip-arg {arg}: reads as {relocating}, which installs outside the "
                                 f"environment being built; not allowed (refused: "
                                 f"{', '.join(_RELOCATING_PIP_OPTIONS)}, any prefix of them, "
                                 f"{', '.join('-' + c for c in _RELOCATING_SHORT_OPTIONS)})")
        if not 0 < self.build_timeout_s <= 86_400:
            raise UsageError(f"--env-build-timeout {self.build_timeout_s:g}: must be in (0, 86400] seconds")


def relocating_pip_option(arg: str) -> str | None:
    """The relocating option `arg` is read as by pip or uv (`--prefi=DIR` is pip's --prefix,
    `-qtDIR` its -t), or None. A word that is only an option's value is judged as an option too:
    refusing a value that looks like one costs nothing, missing an option costs the install."""
    if arg.startswith("--"):
        option = arg.partition("=")[0]
        if len(option) <= 2 or option in _OPTIONS_PREFIXING_RELOCATING:
            return None
        return next((full for full in _RELOCATING_PIP_OPTIONS if full.startswith(option)), None)
    if arg.startswith("-"):
        for letter in arg[1:]:
            if letter in _RELOCATING_SHORT_OPTIONS:
                return f"-{letter}"
            if letter not in _FLAG_SHORT_OPTIONS:  # an option that takes the rest as its value
                return None
    return None


@dataclass(frozen=True)
class BaseInterpreter:
    """The interpreter an environment is made from, as it reports itself."""

    python: str
    executable: str  # the real file, links resolved
    version: str
    prefix: str
    # Its own site-packages where it is itself a virtual environment: inherited through a .pth.
    venv_site_dirs: tuple[str, ...]
    has_pip: bool

    @property
    def identity(self) -> str:
        """Changes when the interpreter or the environment it runs in does."""
        return hashlib.sha256(f"{self.executable}\n{self.version}\n{self.prefix}".encode()).hexdigest()

    @classmethod
    @functools.cache  # one subprocess per interpreter and process (bisect runs many)
    def inspect(cls, python: str) -> BaseInterpreter:
        proc = subprocess.run([python, "-c", _BASE_PROBE], capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise UsageError(f"interpreter {python} cannot be run: {proc.stderr.strip()[-500:]}")
        facts = json.loads(proc.stdout.strip().splitlines()[-1])  # after anything a sitecustomize prints
        return cls(python, facts["executable"], facts["version"], facts["prefix"],
                   tuple(facts["site_dirs"]) if facts["in_venv"] else (), facts["has_pip"])


@dataclass(frozen=True)
class EnvKey:
    sha: str  # the revision: the file may name paths inside its tree (`-e .`)
    file_sha256: str
    interpreter: str  # BaseInterpreter.identity
    pip_args: str = ""  # sha256 of the pip options: they choose what is installed (--find-links)

    @property
    def name(self) -> str:
        return f"{self.sha[:12]}-{self.file_sha256[:12]}-{self.interpreter[:8]}-{self.pip_args[:8]}"

    def to_dict(self) -> dict[str, str]:
        return {"sha": self.sha, "file_sha256": self.file_sha256, "interpreter": self.interpreter,
                "pip_args": self.pip_args}


@dataclass(frozen=True)
class RevisionEnv:
    """One revision's environment as a run uses it: built (with the versions installed of the
    packages its file names) or failed (`error`: why, pip's output tail)."""

    file: str  # relative to the revision's tree
    key: EnvKey
    path: Path  # the published name: <cache>/envs/<key.name>
    packages: dict[str, str | None] = field(default_factory=dict)  # name → version (None: absent)
    built_at: str = ""
    error: str = ""

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"path": str(self.path), "python": self.python, "file": self.file,
                                "key": self.key.to_dict(), "packages": self.packages,
                                "built_at": self.built_at}
        return {**d, "error": self.error} if self.error else d


def envs_root() -> Path:
    return cache_dir() / "envs"


def env_key(sha: str, env_file: Path, base: BaseInterpreter, pip_args: Sequence[str] = ()) -> EnvKey:
    return EnvKey(sha, hashlib.sha256(read_file(env_file, INPUT_FILE)).hexdigest(), base.identity,
                  hashlib.sha256("\0".join(pip_args).encode()).hexdigest())


def revision_env(sha: str | None, worktree: Path | None, options: EnvOptions,
                 base_python: str) -> RevisionEnv | None:
    """The revision's environment, made from `base_python` if it is not cached yet; None when
    the revision declares none (no file, or an installed package with no tree)."""
    if sha is None or worktree is None or not (worktree / options.file).is_file():
        return None
    env_file = inside_tree(worktree, options.file)
    base = BaseInterpreter.inspect(base_python)
    try:
        key = env_key(sha, env_file, base, options.pip_args)
    except TooLarge as exc:
        raise UsageError(f"--env-file {options.file}: {exc}") from None
    path = envs_root() / key.name
    try:
        manifest = ensure_built(path, env_file, worktree, base, options)
    except EnvBuildError as exc:
        return RevisionEnv(options.file, key, path, error=str(exc))
    built = RevisionEnv(options.file, key, path, built_at=str(manifest["built_at"]))
    return dataclasses.replace(built, packages=installed_versions(built.python, requirement_names(env_file)))


def inside_tree(worktree: Path, rel: str) -> Path:
    """The env file, links resolved, or UsageError where it leads out of the revision's tree
    (a link to /etc/hostname made pip install a package named after that file's content)."""
    real, tree = (worktree / rel).resolve(), worktree.resolve()
    if not real.is_relative_to(tree):
        raise UsageError(f"--env-file {rel}: resolves to {real}, outside the revision's tree {tree}")
    return real


def ensure_built(path: Path, env_file: Path, worktree: Path, base: BaseInterpreter,
                 options: EnvOptions) -> dict[str, object]:
    """The manifest of the environment published at `path`, built first if it is not there."""
    if (manifest := published_manifest(path)) is not None:
        return manifest
    root = path.parent
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / f".{path.name}.lock"):
        if (manifest := published_manifest(path)) is not None:  # built by another run meanwhile
            return manifest
        # What an interrupted build left, and a published name whose directory is gone or
        # damaged: rebuilt from nothing.
        for stale in (path, *root.glob(f"{path.name}.*")):
            remove(stale)
        building = root / f"{path.name}.{os.getpid()}"
        try:
            manifest = build(building, env_file, worktree, base, options)
            check_installed(building, env_file)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        publish(building, path)
        return manifest


def published_manifest(path: Path) -> dict[str, object] | None:
    """The manifest of a complete environment at `path`, or None (absent, or its directory gone)."""
    try:
        return json.loads((path / MANIFEST).read_text()) if path.is_symlink() else None
    except (OSError, json.JSONDecodeError):
        return None


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def publish(building: Path, path: Path) -> None:
    """The key's name points at the finished build, in one rename."""
    link = path.with_name(f".{path.name}.link-{os.getpid()}")
    link.unlink(missing_ok=True)
    os.symlink(building.name, link)
    os.replace(link, path)


def build(building: Path, env_file: Path, worktree: Path, base: BaseInterpreter,
          options: EnvOptions) -> dict[str, object]:
    t0 = time.monotonic()
    uv = shutil.which("uv")
    # An index URL's credentials (in the pip options or PIP_INDEX_URL) stay out of what is kept.
    secrets = environment_secrets(dict(os.environ), options.pip_args)
    log: list[str] = []
    for i, (step, argv) in enumerate(build_commands(building, env_file, base, options.pip_args, uv)):
        left_s = options.build_timeout_s - (time.monotonic() - t0)
        code, output = run_step(argv, worktree, left_s)
        log += [f"$ {shlex.join(argv)}", output]
        if code is None:
            raise EnvBuildError(scrub(f"{step} timed out after {options.build_timeout_s:g} s (the build's limit, "
                                      f"--env-build-timeout); its processes were killed:\n"
                                      f"{tail_lines(output)}", secrets))
        if code != 0:
            raise EnvBuildError(scrub(f"{step} exit {code}:\n{tail_lines(output)}", secrets))
        if i == 0 and base.venv_site_dirs:  # inherited before anything is installed over it
            inherit_site_dirs(building / "bin" / "python", base.venv_site_dirs)
    (building / BUILD_LOG).write_text(scrub("\n".join(log), secrets))
    manifest = {"built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_s": round(time.monotonic() - t0, 3), "installer": "uv" if uv else "pip",
                "base_python": base.python, "base_version": base.version}
    # Last: a directory without its manifest is an interrupted build.
    (building / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def run_step(argv: list[str], cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit code, stdout + stderr) of one build step; (None, …) when it ran past `timeout_s`,
    after killing its whole process group (pip's own children build in processes of their own)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=max(timeout_s, 0.001))
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        output, _ = proc.communicate()
        return None, output
    except BaseException:  # an interrupt: no build left running behind the harness
        kill_group(proc.pid)
        proc.wait()
        raise


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def tail_lines(output: str) -> str:
    return "\n".join(output.strip().splitlines()[-FAILURE_TAIL_LINES:])


def check_installed(building: Path, env_file: Path) -> None:
    """EnvBuildError unless every package the file names imports from the new environment, at
    the version it pins: an install that went elsewhere must not be published as this one."""
    pins = requirement_pins(env_file)
    versions = installed_versions(str(building / "bin" / "python"), list(pins))
    wrong = [f"{name} {'absent' if got is None else got}" + (f" (pinned {pin})" if pin else "")
             for name, pin in pins.items() if (got := versions.get(name)) is None or (pin and not same_version(pin, got))]
    if wrong:
        raise EnvBuildError(f"the install left the environment without what {env_file.name} names: "
                            f"{', '.join(wrong)} (did a pip option send it elsewhere?)")


def same_version(pinned: str, installed: str) -> bool:
    """`==1.0` is met by 1.0 and 1.0.0 (trailing zero release parts are equal in PEP 440)."""
    def release(version: str) -> str:
        parts = version.strip().split(".")
        while len(parts) > 1 and parts[-1] == "0":
            parts.pop()
        return ".".join(parts)
    return release(pinned) == release(installed)


def build_commands(building: Path, env_file: Path, base: BaseInterpreter, pip_args: Sequence[str],
                   uv: str | None) -> list[tuple[str, list[str]]]:
    """Make the environment, then install the file into it: with uv where it is on PATH (much
    faster), else venv + pip. Without uv, the environment gets no pip of its own where the base
    has one (it is inherited, and seeding one costs seconds)."""
    python = str(building / "bin" / "python")
    if uv:
        return [("uv venv", [uv, "venv", "--system-site-packages", "--python", base.python, str(building)]),
                ("uv pip install", [uv, "pip", "install", "--python", python, "-r", str(env_file), *pip_args])]
    make = [base.python, "-m", "venv", "--system-site-packages", str(building)]
    if base.has_pip:
        make.insert(-1, "--without-pip")
    return [("venv", make),
            ("pip install", [python, "-m", "pip", "install", "--disable-pip-version-check", "-r", str(env_file),
                             *pip_args])]


def inherit_site_dirs(python: Path, site_dirs: Sequence[str]) -> None:
    """A .pth in the new environment's site-packages that adds the base environment's as site
    directories (so their own .pth files, editable installs among them, work too): searched after
    the new environment's own packages, before the system's."""
    proc = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True)
    Path(proc.stdout.strip(), INHERIT_PTH).write_text("".join(f"import site; site.addsitedir({d!r})\n"
                                                              for d in site_dirs))


def requirement_names(env_file: Path) -> list[str]:
    """The project names a requirements file pins (options, paths and URLs left out)."""
    return list(requirement_pins(env_file))


def requirement_pins(env_file: Path) -> dict[str, str]:
    """Each project a requirements file names → the version an `==` pins it at ("" unpinned)."""
    pins: dict[str, str] = {}
    for line in read_file_text(env_file).splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-", ".", "/")) or "://" in line.split("@", 1)[0]:
            continue
        if match := _REQUIREMENT_NAME.match(line):
            pin = _EXACT_PIN.match(line[match.end():])
            pins.setdefault(match.group(1), pin.group(1) if pin else "")
    return pins


def installed_versions(python: str, names: Sequence[str]) -> dict[str, str | None]:
    """The version each package has as `python` imports it (None: not installed)."""
    if not names:
        return {}
    proc = subprocess.run([python, "-c", _VERSIONS_PROBE, *names], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(proc.stdout) if proc.returncode == 0 else {}
    except json.JSONDecodeError:
        return {}
