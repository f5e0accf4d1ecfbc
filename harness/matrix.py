"""The hardware matrix (matrix.toml): which suites run on which machines, with what flags.

Each [[entry]] becomes one nox session `validate(<name>)` and one `detcheck matrix run
<name>`. How many GPUs one server spans is declared (`gpus_per_server`) or read from the
configurations' own --tp-size/--dp-size/--pp-size/--ep-size and context-parallel flags
(`configs.gpus_per_server`, the widest configuration of the entry's suites); the entry's GPUs fall into gpus ÷ that groups, each a fixed
CUDA_VISIBLE_DEVICES set (`device_groups`), and harness.pipeline.slots turns the groups into server
slots: servers_per_gpu servers on each group, or one. Two groups or more: base and candidate
side by side; one: in turn (a one-GPU server on a one-GPU entry: both servers on the card).
A refserver entry's GPUs are modelled (the reference server checks that it sees as many
devices as its --tp-size asks): it needs no GPU on the machine.

Loaded with the standard library only: noxfile.py imports this before anything is installed.
Every error names the file and the field.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness import estimates
from harness.errors import UsageError
from harness.suite import check_reserved
from harness.targets import TARGET_NAMES
from harness.typed_toml import TomlTable

_ENTRY_KEYS = {"name", "description", "gpu", "gpus", "servers_per_gpu", "gpus_per_server", "suites", "target",
               "server_args", "env", "order_from", "first_per_model", "runner", "est_time", "partitions", "python"}
# A CI runner label as SGLang's self-hosted runners are named ({n}-gpu-{hardware}: 2-gpu-h100).
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CPU_RUNNER = "cpu"  # the label of an entry without GPUs (or whose GPUs the reference server models)
MAX_PARTITIONS = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# More than any one host holds: bounds what an entry's slots and device lists are built from.
MAX_GPUS = 64
MAX_SERVERS_PER_GPU = 64


@dataclass(frozen=True)
class MatrixEntry:
    name: str
    gpu: str  # GPU kind as nvidia-smi names it, matched as a substring ("H200"); "" for CPU
    gpus: int
    suites: tuple[Path, ...]
    target: str | None = None  # None: the target `--repo`'s checkout holds, as run and bisect choose
    server_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""
    # Servers that fit on one GPU at once (their memory flags in server_args); None: one server
    # per role's half of the GPUs.
    servers_per_gpu: int | None = None
    # The start order of the entry's pool (harness.pipeline.start_order): earlier runs whose job times put
    # the longest jobs first (paths as resolved from the matrix file), and one server per model
    # first.
    order_from: tuple[Path, ...] = ()
    first_per_model: bool = False
    # GPUs one server spans, where declared; None: read from the configurations' flags.
    gpus_per_server: int | None = None
    # The CI job it is: the runner label it needs ("" : `default_runner`), its declared length in
    # seconds (None: from its order_from runs, harness.estimates), and how many jobs its suites
    # split into (longest-processing-time over the suites' estimates).
    runner: str = ""
    est_time: float | None = None
    partitions: int = 1
    # The servers' interpreter on the entry's runners (the environment SGLang is installed in);
    # None: `matrix run --python`, else the one running detcheck.
    python: str | None = None

    @property
    def runner_label(self) -> str:
        """The runner label: declared, else SGLang's form `{gpus}-gpu-{gpu}` (`2-gpu-h200`), or
        CPU_RUNNER for an entry without GPUs on the machine."""
        if self.runner:
            return self.runner
        if self.gpus == 0 or self.modelled:
            return CPU_RUNNER
        return f"{self.gpus}-gpu-{re.sub(r'[^a-z0-9]+', '-', self.gpu.lower()).strip('-')}"

    def estimate(self) -> float | None:
        """Seconds the entry takes: declared, else its order_from runs' wall time; None: untimed."""
        return self.est_time if self.est_time is not None else estimates.runs_seconds(self.order_from)

    def suite_estimates(self) -> list[float | None]:
        """Seconds each suite takes, from its order_from runs (by the suite file's stem, the
        directory a matrix run writes it to); a declared est_time split over the suites alike."""
        if self.est_time is not None:
            return [self.est_time / len(self.suites)] * len(self.suites)
        timed = estimates.suite_seconds(self.order_from) if self.order_from else {}
        return [timed.get(s.stem) for s in self.suites]

    def partition(self, index: int) -> tuple[Path, ...]:
        """The suites of partition `index` (1-based) of `partitions`, longest first."""
        groups = estimates.lpt_partition(list(self.suites), self.suite_estimates(), self.partitions)
        if not 1 <= index <= len(groups):
            raise UsageError(f"[[entry]] {self.name!r}: --partition {index}: it has {len(groups)} "
                             f"(partitions = {self.partitions}, {len(self.suites)} suites)")
        return tuple(groups[index - 1])

    def jobs(self) -> list[tuple[str, int, float | None]]:
        """Its CI jobs: (id, partition, seconds); id is the entry's name, or `name-KofN` when its
        suites are split (partition 0: the whole entry)."""
        if self.partitions == 1:
            return [(self.name, 0, self.estimate())]
        groups = estimates.lpt_partition(list(range(len(self.suites))), self.suite_estimates(), self.partitions)
        times = self.suite_estimates()
        return [(f"{self.name}-{k}of{len(groups)}", k, _total([times[i] for i in g]))
                for k, g in enumerate(groups, start=1)]

    @property
    def parallel(self) -> bool:
        """Base and candidate at once, at the declared GPUs per server (1 where undeclared): two
        groups of GPUs or more, or two slots on the one group."""
        groups = self.gpus // (self.gpus_per_server or 1)
        return groups >= 2 or (self.servers_per_gpu or 1) * groups >= 2

    @property
    def modelled(self) -> bool:
        """GPUs the reference server models (device labels it checks), none on the machine."""
        return self.target == "refserver"

    def missing(self, gpu_names: list[str] | None) -> str | None:
        """Why this machine cannot run the entry (`gpu_names` None: no nvidia-smi); None if it can."""
        if self.gpus == 0 or self.modelled:
            return None
        if gpu_names is None:
            return f"needs {self.gpus}× {self.gpu or 'GPU'}; this machine has no nvidia-smi"
        fitting = [n for n in gpu_names if self.gpu.lower() in n.lower()]
        if len(fitting) < self.gpus:
            found = ", ".join(sorted(set(gpu_names))) or "none"
            return f"needs {self.gpus}× {self.gpu or 'GPU'}; this machine has {len(fitting)} (GPUs: {found})"
        return None

    def devices(self, visible: str | None = None) -> list[str]:
        """The entry's GPUs: the first `gpus` of the caller's CUDA_VISIBLE_DEVICES (or 0…gpus-1).
        Fewer visible than the entry needs is UsageError: servers given no GPU (an empty
        CUDA_VISIBLE_DEVICES) would run without one, or on the wrong one."""
        if visible is None:
            return [str(i) for i in range(self.gpus)]
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        if len(devices) < self.gpus:
            raise UsageError(f"[[entry]] {self.name!r} needs {self.gpus} GPUs; CUDA_VISIBLE_DEVICES={visible!r} "
                             f"makes {len(devices)} visible")
        return devices[: self.gpus]

    def device_groups(self, per_server: int, visible: str | None = None) -> list[str]:
        """The entry's GPUs in groups of `per_server`, each a CUDA_VISIBLE_DEVICES value, in
        order (GPUs left over are unused); `visible` is the caller's own CUDA_VISIBLE_DEVICES.
        A server wider than the entry is UsageError."""
        devices = self.devices(visible)
        if per_server > len(devices):
            raise UsageError(f"[[entry]] {self.name!r}: a server spans {per_server} GPUs and the entry has "
                             f"{len(devices)} (gpus = {self.gpus})")
        return [",".join(devices[i:i + per_server]) for i in range(0, len(devices) - per_server + 1, per_server)]


@dataclass(frozen=True)
class Matrix:
    path: Path
    entries: tuple[MatrixEntry, ...]

    def entry(self, name: str) -> MatrixEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise UsageError(f"{self.path}: no [[entry]] named {name!r} "
                         f"(have: {', '.join(e.name for e in self.entries)})")


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    top = TomlTable.read(path, "matrix")
    top.check_keys(("entry",))
    entries = tuple(_entry(top, item, i) for i, item in enumerate(top.array("entry", "[[entry]]")))
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.name in seen:
            raise UsageError(f"{path}: [[entry]] #{i + 1}.name: duplicate name {e.name!r} "
                             f"(also [[entry]] #{seen[e.name] + 1}); nox session names must be unique")
        seen[e.name] = i
    return Matrix(path, entries)


def _entry(top: TomlTable, raw: object, index: int) -> MatrixEntry:
    path = top.path
    entry = top.item(raw, f"[[entry]] #{index + 1}")
    entry.check_keys(_ENTRY_KEYS)
    name = entry.raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise entry.error("name", "must be a string of letters, digits, '_', '.', '-'")
    entry = entry.named(f"[[entry]] {name!r}")
    gpus = entry.integer("gpus", 0, 0, MAX_GPUS)
    target = entry.raw.get("target")
    if target is not None and target not in TARGET_NAMES:
        raise entry.error("target", f"{target!r} is not one of {', '.join(TARGET_NAMES)}")
    gpu = entry.raw.get("gpu", "")
    if not isinstance(gpu, str) or (gpus > 0 and not gpu and target != "refserver"):
        raise entry.error("gpu", "must name the GPU kind (e.g. \"H200\") when gpus > 0")
    per_server = entry.raw.get("gpus_per_server")
    if per_server is not None and (not isinstance(per_server, int) or isinstance(per_server, bool)
                                   or not 1 <= per_server <= max(gpus, 1) or gpus == 0):
        raise entry.error("gpus_per_server", f"must be an integer from 1 to gpus ({gpus}), on an entry with gpus >= 1")
    suites = entry.strings("suites")
    if not suites:
        raise entry.error("suites", "list at least one suite file")
    resolved = []
    for s in suites:
        suite = (path.parent / s).resolve()
        if not suite.is_file():
            raise entry.error("suites", f"{s!r} not found (looked at {suite})")
        resolved.append(suite)
    env = entry.env()
    description = entry.string("description", "")
    server_args = entry.strings("server_args")
    check_reserved(server_args, f"{entry.label}.server_args")
    servers_per_gpu = entry.raw.get("servers_per_gpu")
    if servers_per_gpu is not None and not valid_servers_per_gpu(servers_per_gpu, gpus):
        raise entry.error("servers_per_gpu", f"must be an integer from 1 to {MAX_SERVERS_PER_GPU}, on an entry "
                                             f"with gpus >= 1")
    order_from = tuple((path.parent / p).resolve() for p in entry.strings("order_from"))
    if missing := [p for p in order_from if not p.exists()]:
        raise entry.error("order_from", f"{', '.join(map(str, missing))} not found")
    first_per_model = entry.boolean("first_per_model", False)
    runner = entry.string("runner", "")
    if runner and not _LABEL.match(runner):
        raise entry.error("runner", "must be a runner label of letters, digits, '_', '.', '-' (e.g. \"2-gpu-h100\")")
    est_time = entry.raw.get("est_time")
    if est_time is not None and (not isinstance(est_time, (int, float)) or isinstance(est_time, bool)
                                 or not 0 < est_time < 7 * 86400):
        raise entry.error("est_time", "must be seconds, more than 0 and less than a week")
    partitions = entry.integer("partitions", 1, 1, MAX_PARTITIONS)
    python = entry.string("python", "") or None
    if python is not None and "/" in python:  # a path: ~ is the runner's home, a relative one the matrix file's
        python = str(path.parent / Path(python).expanduser())
    return MatrixEntry(name=name, gpu=gpu, gpus=gpus, suites=tuple(resolved), target=target,
                       runner=runner, est_time=None if est_time is None else float(est_time),
                       partitions=partitions, server_args=server_args, servers_per_gpu=servers_per_gpu, env=env,
                       description=description, order_from=order_from, first_per_model=first_per_model,
                       gpus_per_server=per_server, python=python)


def _total(seconds: list[float | None]) -> float | None:
    """The seconds of a job of suites, None where one of them is untimed."""
    timed = [s for s in seconds if s is not None]
    return round(sum(timed), 1) if len(timed) == len(seconds) else None


def valid_servers_per_gpu(count: object, gpus: int) -> bool:
    """Servers per GPU, an entry's (servers_per_gpu) or a run's (--servers-per-gpu): an integer
    from 1 to MAX_SERVERS_PER_GPU, on an entry with GPUs."""
    return (isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_SERVERS_PER_GPU
            and gpus >= 1)


def gpu_names() -> list[str] | None:
    """This machine's GPUs as nvidia-smi names them; None without nvidia-smi (or if it fails)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    names = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:  # only the GPUs this process may use
        names = names[: len([d for d in visible.split(",") if d.strip()])]
    return names
