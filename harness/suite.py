"""Suite files: load (harness.typed_toml), validate, and resolve into ServerConfigs per target.

A suite names configurations by *features* (deterministic, Mamba pool, speculative algorithm,
SWA ratio), not by flag spellings: spellings differ across SGLang revisions and are chosen
per revision by harness.capabilities. Every error names the file and the field, and is raised
before anything is launched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from harness.configs import KV_CANARY_MODES, KV_CANARY_REAL_DATA, Features, ServerConfig, SpeculativeSpec, flag_value
from harness.errors import UsageError
from harness.params import Param, ParamRole, validate_params
from harness.targets import TARGET_NAMES
from harness.typed_toml import TomlTable

# Set by the harness alone: every server listens on 127.0.0.1, on a port the harness picks.
RESERVED_FLAGS = ("--host", "--port")
MAMBA_POOLS = ("no_buffer", "static", "lazy", "unified")
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "DFLASH", "DSPARK")

_SUITE_KEYS = {"name", "description", "models", "server", "workload", "config", "probe", "graph_modes"}
_SERVER_KEYS = {"args", "env", "target_args", "startup_timeout_s", "request_timeout_s"}
_CONFIG_KEYS = {
    "name", "probes", "deterministic", "mamba_pool", "mamba_track_interval", "speculative",
    "draft", "model", "swa_ratio", "disable_radix_cache", "cuda_graph", "args", "env", "target_args",
    "retract_interval", "max_total_tokens", "min_retractions", "debug_invariants",
    "kv_canary", "kv_canary_real_data", "kv_canary_sweep_interval",
}
# Suite-level `graph_modes`: each configuration without its own `cuda_graph` runs once per mode,
# as `<name>-graphs-<mode>`.
GRAPH_MODES = {"off": False, "on": True}
# Literal flags that switch every CUDA graph off: they contradict (or duplicate) `cuda_graph`.
GRAPH_OFF_FLAGS = ("--disable-cuda-graph",)
_SPEC_KEYS = {
    "algorithm", "num_steps", "eagle_topk", "num_draft_tokens", "block_size", "multi_layer",
}
# A configuration name becomes part of file names (logs, plots, store paths).
CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")


def _scalar(name: str, type_: Any, doc: str, **bounds: Any) -> Param:
    """A typed [[config]] field (its role does not apply: every field is in the fingerprint)."""
    return Param(name, type_, None, doc, ParamRole.MEASURED, **bounds)


CONFIG_SCALARS = {p.name: p for p in (
    _scalar("deterministic", bool, "--enable-deterministic-inference"),
    _scalar("disable_radix_cache", bool, "--disable-radix-cache"),
    _scalar("mamba_pool", str, "Mamba state pool", choices=MAMBA_POOLS),
    _scalar("mamba_track_interval", int, "tokens between Mamba checkpoints", low=1, high=1_000_000),
    _scalar("swa_ratio", float, "--swa-full-tokens-ratio", low=1e-6, high=1.0),
    _scalar("cuda_graph", bool, "CUDA graphs off/on, spelled per revision (unset: the server's default)"),
    _scalar("retract_interval", int, "force a retraction every this many batches (SGLANG_TEST_RETRACT_INTERVAL)",
            low=1, high=1_000_000),
    _scalar("max_total_tokens", int, "a small token pool: --max-total-tokens", low=16, high=10**10),
    _scalar("min_retractions", int, "retractions each cell must see under pressure, fewer is vacuous "
            "(default 10, upstream's bar)", low=0, high=10**9),
    _scalar("debug_invariants", bool, "SGLang's debug invariants in the server's environment "
            "(default: on under pressure)"),
    _scalar("kv_canary", str, "SGLang's KV cache canary (default: log on a deterministic configuration "
            "where --help has --kv-canary)", choices=KV_CANARY_MODES),
    _scalar("kv_canary_real_data", str, "--kv-canary-real-data (default partial)", choices=KV_CANARY_REAL_DATA),
    _scalar("kv_canary_sweep_interval", int, "--kv-canary-sweep-interval (default 1)", low=1, high=10**6),
)}
SPECULATIVE_SCALARS = {p.name: p for p in (
    _scalar("algorithm", str, "speculative algorithm"),
    _scalar("num_steps", int, "draft steps", low=1, high=64),
    _scalar("eagle_topk", int, "EAGLE top-k", low=1, high=64),
    _scalar("num_draft_tokens", int, "draft tokens", low=1, high=1024),
    _scalar("block_size", int, "DFLASH/DSPARK block", low=1, high=1024),
    _scalar("multi_layer", bool, "multi-layer EAGLE"),
)}


def _min_max(value: list[int]) -> str | None:
    if len(value) != 2 or value[0] > value[1]:
        return "must be [min, max] with min <= max"
    return None


# What [workload] and a [probe.<name>] table may set about the prompts. No defaults here: the
# WorkloadSpec's are the defaults, and a probe's unset override falls back to the suite's.
WORKLOAD_PARAMS = (
    Param("kind", str, None, "where prompts come from", ParamRole.MEASURED,
          choices=("synthetic", "longbench")),
    Param("prompts", int, None, "number of prompts", ParamRole.MEASURED, low=1, high=100_000),
    Param("prompt_len", list[int], None, "[min, max] prompt tokens", ParamRole.MEASURED,
          low=1, high=1_000_000, check=_min_max),
    Param("output_len", int, None, "tokens generated per request", ParamRole.MEASURED,
          low=1, high=1_000_000),
    Param("seed", int, None, "seed of the synthetic prompts", ParamRole.MEASURED, low=0),
    Param("vocab", int, None, "synthetic token ids are below this", ParamRole.MEASURED,
          low=1, high=10_000_000),
    Param("low_token", int, None, "synthetic token ids start here", ParamRole.MEASURED, low=0),
    Param("path", str, None, "longbench file, relative to the suite", ParamRole.MEASURED),
)
_WORKLOAD_KEYS = {p.name for p in WORKLOAD_PARAMS}


class ProbeSchema(Protocol):
    """What load_suite needs of a probe: its [probe.<name>] table checked, defaults filled, and
    the suite's design checked (can its noisy deciding metrics reach alpha at all?)."""

    def validate(self, raw: dict[str, Any], where: str) -> dict[str, Any]: ...

    def check_design(self, params: dict[str, Any], workload: WorkloadSpec, deterministic: bool,
                     where: str) -> None: ...


@dataclass(frozen=True)
class WorkloadSpec:
    kind: str = "synthetic"
    prompts: int = 8
    prompt_len: tuple[int, int] = (48, 96)
    output_len: int = 48
    seed: int = 0
    vocab: int = 500
    low_token: int = 3  # below: bos/eos/pad ids that real models treat specially
    path: str | None = None

    def with_overrides(self, params: dict[str, Any]) -> WorkloadSpec:
        """This workload with the workload keys `params` sets (None: not set)."""
        keep = {k: v for k, v in params.items() if k in _WORKLOAD_KEYS and v is not None}
        if "prompt_len" in keep:
            keep["prompt_len"] = tuple(keep["prompt_len"])
        return WorkloadSpec(**{**self.__dict__, **keep})

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "prompt_len": list(self.prompt_len)}


@dataclass(frozen=True)
class ProbeSpec:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigSpec:
    """One [[config]] of a suite, target-independent."""

    name: str
    probes: tuple[str, ...]
    features: Features
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    target_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    draft: dict[str, str] = field(default_factory=dict)
    model: dict[str, str] = field(default_factory=dict)  # per target, in place of [models]


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    description: str
    models: dict[str, Path]
    server_args: tuple[str, ...]
    server_env: dict[str, str]
    target_args: dict[str, tuple[str, ...]]
    startup_timeout_s: float
    request_timeout_s: float
    workload: WorkloadSpec
    configs: tuple[ConfigSpec, ...]
    probe_params: dict[str, dict[str, Any]]

    def probe_spec(self, kind: str) -> ProbeSpec:
        return ProbeSpec(kind, dict(self.probe_params.get(kind, {})))

    def config(self, name: str) -> ConfigSpec:
        for c in self.configs:
            if c.name == name:
                return c
        raise UsageError(f"{self.path}: no [[config]] named {name!r} "
                         f"(have: {', '.join(c.name for c in self.configs)})")

    def server_config(self, spec: ConfigSpec, target: str) -> ServerConfig:
        if target not in self.models and target not in spec.model:
            raise UsageError(f"{self.path}: [models] has no model for target {target!r}")
        draft = spec.draft.get(target)
        if spec.features.speculative and not draft and target == "refserver":
            raise UsageError(f"{self.path}: config {spec.name!r} is speculative but "
                             f"[config.draft] has no {target!r} model")
        return ServerConfig(
            name=spec.name,
            target=target,
            model=(_resolve_model(self.path, spec.model[target], f"config {spec.name!r} model")
                   if target in spec.model else self.models[target]),
            features=spec.features,
            args=(*self.server_args, *self.target_args.get(target, ()), *spec.args,
                  *spec.target_args.get(target, ())),
            env={**spec.features.env(), **self.server_env, **spec.env},
            draft_model=_resolve_model(self.path, draft, f"config {spec.name!r} draft") if draft else None,
        )


def load_suite(path: str | Path, known_probes: Mapping[str, ProbeSchema] | None = None,
               overrides: Mapping[str, Mapping[str, Any]] | None = None, need_models: bool = True) -> Suite:
    """Read and validate a suite file; raise UsageError naming the file and field.

    With `known_probes` (harness.probes.known_probes()), every probe named is checked to
    exist and every [probe.<name>] table against its schema; probe_params then holds the
    validated parameters, defaults filled, of each probe the suite mentions. `overrides`
    (`--set probe.param=value`) win over the tables, checked against the same schemas.
    `need_models` False: a reader of its parameters only (`report --check` of a downloaded run,
    where the GPU machine's model directories are not) does not need [models] to exist."""
    path = Path(path)
    top = TomlTable.read(path, "suite")
    top.check_keys(_SUITE_KEYS)
    raw = top.raw

    models_table = top.table("models")
    models = {}
    for target in models_table.raw:
        if target not in TARGET_NAMES:
            raise UsageError(f"{path}: [models].{target}: unknown target (known: {', '.join(TARGET_NAMES)})")
        models[target] = (_resolve_model(path, models_table.string(target), f"[models].{target}") if need_models
                          else (path.parent / models_table.string(target)).resolve())

    server = top.table("server")
    server.check_keys(_SERVER_KEYS)
    target_args_table = server.table("target_args")
    for t in target_args_table.raw:
        if t not in TARGET_NAMES:
            raise UsageError(f"{path}: [server.target_args].{t}: unknown target")

    workload = _load_workload(top.table("workload"))

    tables = top.table("probe").raw
    for kind, params in tables.items():
        if known_probes is not None and kind not in known_probes:
            raise UsageError(f"{path}: [probe.{kind}]: unknown probe "
                             f"(known: {', '.join(sorted(known_probes))})")
        if not isinstance(params, dict):
            raise UsageError(f"{path}: [probe.{kind}] must be a table")
    overrides = overrides or {}
    tables = _with_overrides(tables, overrides, known_probes)

    configs_raw = top.array("config", "[[config]]")
    configs = tuple(_load_config(top, c, i, known_probes) for i, c in enumerate(configs_raw))
    configs = _expand_graph_modes(path, raw.get("graph_modes"), configs)
    names = [c.name for c in configs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"{path}: duplicate [[config]] names: {', '.join(sorted(dup))}")
    _check_overridden_probes_run(overrides, configs)
    probe_params = (tables if known_probes is None
                    else _probe_params(path, tables, configs, known_probes, workload, overrides))
    server_args = _server_args(server, "args")
    target_args = {t: _server_args(target_args_table.named("[server.target_args]"), t) for t in target_args_table.raw}
    _check_graph_args(path, (*server_args, *(a for args in target_args.values() for a in args)), configs)

    suite = Suite(
        name=top.string("name", default=path.stem),
        path=path,
        description=top.string("description", default=""),
        models=models,
        server_args=server_args,
        server_env=server.env(),
        target_args=target_args,
        startup_timeout_s=server.seconds("startup_timeout_s", 180.0),
        request_timeout_s=server.seconds("request_timeout_s", 300.0),
        workload=workload,
        configs=configs,
        probe_params=probe_params,
    )
    for c in configs if need_models else ():  # a check of what a server is started with
        if "sglang" in models or "sglang" in c.model:
            check_deterministic_chunking(suite.server_config(c, "sglang"), f"{path}: [[config]] {c.name!r}")
    return suite


def _with_overrides(tables: dict[str, Any], overrides: Mapping[str, Mapping[str, Any]],
                    known_probes: Mapping[str, ProbeSchema] | None) -> dict[str, Any]:
    """The [probe.<name>] tables with `--set` values over them; each override is checked on its
    own first, so that an unknown name or a bad value is reported as the option's."""
    merged = dict(tables)
    for kind, values in overrides.items():
        if known_probes is not None:
            if kind not in known_probes:
                raise UsageError(f"{_set_option(kind, values)}: unknown probe "
                                 f"(known: {', '.join(sorted(known_probes))})")
            # Where "--set kl" names the option: a bad key reads `--set kl.tau: …` in full.
            known_probes[kind].validate(dict(values), f"--set {kind}")
        merged[kind] = {**merged.get(kind, {}), **values}
    return merged


def _set_option(kind: str, values: Mapping[str, Any]) -> str:
    """The `--set` options given for probe `kind`, as typed: `--set kl.tau`, `--set kl.tau/top_k`."""
    return f"--set {kind}.{'/'.join(values)}"


def _check_overridden_probes_run(overrides: Mapping[str, Mapping[str, Any]], configs: tuple[ConfigSpec, ...]) -> None:
    """A `--set` for a probe no configuration runs would change nothing: most likely a typo of
    the probe that was meant, so it is refused rather than ignored."""
    run = {p for c in configs for p in c.probes}
    for kind, values in overrides.items():
        if kind not in run:
            raise UsageError(f"{_set_option(kind, values)}: the suite runs no {kind} probe "
                             f"(it runs: {', '.join(sorted(run))})")


def _probe_params(path: Path, tables: dict[str, Any], configs: tuple[ConfigSpec, ...],
                  known_probes: Mapping[str, ProbeSchema], workload: WorkloadSpec,
                  overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The validated parameters of every probe the suite has a table for or runs. A check that
    fails only because of a `--set` value names the option, not the suite file."""
    used = dict.fromkeys([*tables, *(p for c in configs for p in c.probes)])
    params = {kind: known_probes[kind].validate(tables.get(kind, {}), f"{path}: [probe.{kind}]")
              for kind in used}
    blame = {kind: _SetBlame(_set_option(kind, values), _suite_only(known_probes[kind], tables[kind], values))
             for kind, values in overrides.items()}
    for kind, p in params.items():
        _check_blaming_set(lambda q, file: _check_workload(f"{file}[workload] with [probe.{kind}]",
                                                           workload.with_overrides(q)),
                           p, path, blame.get(kind))
    for kind, p in params.items():
        check_suite = getattr(known_probes[kind], "check_suite", None)
        if check_suite is not None:
            running = [c.name for c in configs if kind in c.probes]
            def suite_check(q: dict[str, Any], file: str, check: Callable[..., None] = check_suite,
                            running: list[str] = running, kind: str = kind) -> None:
                check(q, running, f"{file}[probe.{kind}]")

            _check_blaming_set(suite_check, p, path, blame.get(kind))
    for c in configs:
        for kind in c.probes:
            _check_blaming_set(
                lambda q, file: known_probes[kind].check_design(q, workload.with_overrides(q),
                                                                c.features.deterministic, f"{file}[probe.{kind}]"),
                params[kind], path, blame.get(kind))
    return params


@dataclass(frozen=True)
class _SetBlame:
    """What a failed check of a probe that `--set` changed is weighed against: the options, and the
    probe's parameters as the suite alone sets them (None: the suite's table is not valid alone)."""

    option: str
    suite_params: dict[str, Any] | None


def _suite_only(schema: ProbeSchema, merged: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any] | None:
    """A probe's parameters as the suite alone sets them (its --set values taken out); None
    where the suite's own table is not valid without them."""
    try:
        return schema.validate({k: v for k, v in merged.items() if k not in values}, "")
    except UsageError:
        return None


def _check_blaming_set(check: Callable[[dict[str, Any], str], None], params: dict[str, Any], path: Path,
                       blame: _SetBlame | None) -> None:
    """`check(params, file)` of one probe's parameters (`file`: how its message names the suite
    file). Where it fails and the suite's own parameters pass, the --set caused it: the message
    opens with the option and names the probe's tables, not the file
    (`--set kl.alpha: [probe.kl].prompts: 8 gives …`)."""
    try:
        check(params, f"{path}: ")
        return
    except UsageError as exc:
        failure = exc
    if blame is not None and blame.suite_params is not None and _passes(check, blame.suite_params):
        try:
            check(params, "")
        except UsageError as exc:
            raise UsageError(f"{blame.option}: {exc}") from None
    raise failure


def _passes(check: Callable[[dict[str, Any], str], None], params: dict[str, Any]) -> bool:
    try:
        check(params, "")
    except UsageError:
        return False
    return True


def _load_workload(table: TomlTable) -> WorkloadSpec:
    spec = WorkloadSpec().with_overrides(validate_params(WORKLOAD_PARAMS, table.raw, table.label))
    _check_workload(table.label, spec)
    return spec


def _check_workload(where: str, spec: WorkloadSpec) -> None:
    """What no single field can check: how fields relate."""
    if spec.vocab <= spec.low_token:
        raise UsageError(f"{where}: vocab must exceed low_token")


def _load_config(top: TomlTable, raw: Any, index: int,
                 known_probes: Mapping[str, ProbeSchema] | None) -> ConfigSpec:
    config = top.item(raw, f"[[config]] #{index + 1}")
    config.check_keys(_CONFIG_KEYS)
    name = config.string("name")
    if not CONFIG_NAME.match(name):
        raise config.error("name", f"{name!r} must be 1-64 ASCII letters, digits and _ . + -, starting with "
                                   f"a letter or digit (it names log and store files)")
    config = config.named(f"[[config]] {name!r}")
    typed = config.params(CONFIG_SCALARS.values())
    probes = config.strings("probes", numbers_as_text=True)
    if not probes:
        raise config.error("probes", "list at least one probe")
    for p in probes:
        if known_probes is not None and p not in known_probes:
            raise config.error("probes", f"unknown probe {p!r} (known: {', '.join(sorted(known_probes))})")

    spec = None
    if "speculative" in config.raw:
        speculative = config.table("speculative")
        speculative.check_keys(_SPEC_KEYS)
        s = speculative.params(SPECULATIVE_SCALARS.values())
        algo = str(s.get("algorithm", "")).upper()
        if algo not in SPEC_ALGORITHMS:
            raise speculative.error("algorithm", f"{s.get('algorithm')!r} is not one of {', '.join(SPEC_ALGORITHMS)}")
        spec = SpeculativeSpec(
            algorithm=algo,
            num_steps=s.get("num_steps"),
            eagle_topk=s.get("eagle_topk"),
            num_draft_tokens=s.get("num_draft_tokens"),
            block_size=s.get("block_size"),
            multi_layer=bool(s.get("multi_layer", False)),
        )
    draft, model = config.table("draft").raw, config.table("model").raw
    for key, table in (("draft", draft), ("model", model)):
        for t in table:
            if t not in TARGET_NAMES:
                raise config.error(f"{key}.{t}", "unknown target")
    target_args = config.table("target_args")
    for t in target_args.raw:
        if t not in TARGET_NAMES:
            raise config.error(f"target_args.{t}", "unknown target")
    return ConfigSpec(
        name=name,
        probes=probes,
        features=Features(
            deterministic=typed.get("deterministic", False),
            mamba_pool=typed.get("mamba_pool"),
            mamba_track_interval=typed.get("mamba_track_interval"),
            speculative=spec,
            swa_ratio=typed.get("swa_ratio"),
            disable_radix_cache=typed.get("disable_radix_cache", False),
            cuda_graph=typed.get("cuda_graph"),
            retract_interval=typed.get("retract_interval"),
            max_total_tokens=typed.get("max_total_tokens"),
            min_retractions=typed.get("min_retractions"),
            debug_invariants=typed.get("debug_invariants"),
            kv_canary=typed.get("kv_canary"),
            kv_canary_real_data=typed.get("kv_canary_real_data"),
            kv_canary_sweep_interval=typed.get("kv_canary_sweep_interval"),
        ),
        args=_server_args(config, "args"),
        env=config.env(),
        target_args={t: _server_args(target_args, t) for t in target_args.raw},
        draft={t: str(v) for t, v in draft.items()},
        model={t: str(v) for t, v in model.items()},
    )


def _expand_graph_modes(path: Path, modes: Any, configs: tuple[ConfigSpec, ...]) -> tuple[ConfigSpec, ...]:
    """`graph_modes = ["off", "on"]`: each configuration that sets no `cuda_graph` of its own
    becomes one configuration per mode, named `<name>-graphs-<mode>`."""
    if modes is None:
        return configs
    if (not isinstance(modes, list) or not modes or len(set(map(str, modes))) != len(modes)
            or any(m not in GRAPH_MODES for m in modes)):
        raise UsageError(f"{path}: graph_modes must be a non-empty list of distinct modes from "
                         f"{', '.join(GRAPH_MODES)} (e.g. [\"off\", \"on\"])")
    out: list[ConfigSpec] = []
    for c in configs:
        if c.features.cuda_graph is not None:
            out.append(c)
            continue
        for mode in modes:
            out.append(replace(c, name=f"{c.name}-graphs-{mode}",
                               features=replace(c.features, cuda_graph=GRAPH_MODES[mode])))
    return tuple(out)


def _check_graph_args(path: Path, suite_args: tuple[str, ...], configs: tuple[ConfigSpec, ...]) -> None:
    for c in configs:
        if c.features.cuda_graph is None:
            continue
        every = (*suite_args, *c.args, *(a for args in c.target_args.values() for a in args))
        for a in every:
            if a.split("=", 1)[0] in GRAPH_OFF_FLAGS:
                raise UsageError(f"{path}: [[config]] {c.name!r}: {a} contradicts cuda_graph / graph_modes "
                                 f"(the harness spells graphs off per revision); drop it from the args")


# SGLang's deterministic inference cuts a chunked prefill only at a multiple of the attention
# backend's alignment (Scheduler.init_deterministic_inference_config: these switches, 4096 by
# default, in 0.5.16 and later). A chunk budget below it never admits a prompt longer than the
# budget: the request is requeued for ever while /health stays 200 (SGLang issue 36344; on the
# H200, 0.5.16 with --chunked-prefill-size 128 never prefilled a batch of 300-token prompts).
DETERMINISTIC_PREFILL_ALIGNMENT = {"triton": ("SGLANG_TRITON_PREFILL_TRUNCATION_ALIGN_SIZE", 4096),
                                   "flashinfer": ("SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE", 4096)}


def check_deterministic_chunking(server: ServerConfig, where: str) -> None:
    """Refuse a deterministic SGLang configuration whose prefill chunk is below its backend's
    alignment: it would stall, and every cell would err only after its request timeout. Checked
    as the suite loads and again with the run's own --server-arg / env (pipeline/plan.py)."""
    backend = flag_value(server.args, ("--attention-backend",))
    chunk = flag_value(server.args, ("--chunked-prefill-size",))
    if not server.features.deterministic or backend not in DETERMINISTIC_PREFILL_ALIGNMENT or chunk is None:
        return
    switch, default = DETERMINISTIC_PREFILL_ALIGNMENT[backend]
    try:
        size, align = int(chunk), int(server.env.get(switch, default))
    except ValueError:
        return  # not a number: SGLang refuses it at launch, in its own words
    if 0 < size < align:
        raise UsageError(
            f"{where}: --chunked-prefill-size {size} is below the {align}-token "
            f"alignment SGLang's deterministic inference cuts {backend} prefill chunks at ({switch}), so no "
            f"prompt longer than {size} tokens is ever prefilled (SGLang issue 36344): set "
            f'env = {{ {switch} = "{size}" }} in the configuration, or a chunk of {align} or more')


def _resolve_model(suite_path: Path, rel: str, field_name: str) -> Path:
    model = (suite_path.parent / rel).resolve()
    if not (model / "config.json").is_file():
        raise UsageError(f"{suite_path}: {field_name}: model directory {model} has no config.json")
    return model


def check_reserved(args: tuple[str, ...], where: str) -> None:
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in RESERVED_FLAGS:
            raise UsageError(f"{where}: {flag} is set by the harness (servers listen on 127.0.0.1, "
                             f"on a port it picks)")


def _server_args(table: TomlTable, key: str) -> tuple[str, ...]:
    """Server arguments (a number stands for its spelling), none that the harness sets itself."""
    args = table.strings(key, numbers_as_text=True)
    check_reserved(args, f"{table.label}.{key}")
    return args
