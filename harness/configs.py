"""What a configuration is, resolved: the features a suite names (`Features`,
`SpeculativeSpec`) and a configuration made concrete for one target (`ServerConfig`).

The facts layer (standard library only): `suite` builds these from suite files, `targets` turns a
`ServerConfig` into a launch command, and neither imports the other.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bounded import INPUT_FILE, TooLarge, read_file
from harness.errors import UsageError

# SGLang's parallelism flags, each with its short alias: how many GPUs one server spans.
_TP, _DP, _PP, _EP = ("--tp-size", "--tp"), ("--dp-size", "--dp"), ("--pp-size", "--pp"), ("--ep-size", "--ep")
# Context parallelism splits a request's sequence over ranks of the TP group (tp8 + CP8 is one
# 8-GPU server): it spans max(tp, cp) GPUs, never tp × cp.
_CP = ("--attn-cp-size", "--cp-size", "--context-parallel-size", "--prefill-cp-size")
_DP_ATTENTION = "--enable-dp-attention"
_NNODES = "--nnodes"
# More than any one host holds: a flag asking for more is a typo, not a server.
MAX_GPUS_PER_SERVER = 64


# SGLang's debug invariants (environ.py of the releases after 0.5.16, `shared/reference/
# sglang-after-0.5.21.md`): the radix tree rebuilt and checked when idle, the KV pages checked for
# use after free and double free, freed pool slots filled with NaN. Each trips an assertion (or a
# NaN) that kills or poisons the server: a finding of the row (harness/logparse.invariant_trips).
DEBUG_INVARIANTS = ("SGLANG_ENABLE_TREE_CACHE_SANITY_CHECK", "SGLANG_CHECK_KV_PAGE_INVARIANTS",
                    "SGLANG_DEBUG_POISON_POOL")

# --kv-canary's and --kv-canary-real-data's choices (SGLang's server_args.py).
KV_CANARY_MODES = ("none", "log", "raise")
KV_CANARY_REAL_DATA = ("none", "partial", "all")


@dataclass(frozen=True)
class SpeculativeSpec:
    algorithm: str
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    block_size: int | None = None  # DFLASH / DSPARK block
    multi_layer: bool = False


@dataclass(frozen=True)
class Features:
    """What a configuration *means*; capabilities.py turns it into a revision's flags."""

    deterministic: bool = False
    mamba_pool: str | None = None
    mamba_track_interval: int | None = None
    speculative: SpeculativeSpec | None = None
    swa_ratio: float | None = None
    disable_radix_cache: bool = False
    # None: the server's default (graphs on); False/True: graphs off/on, spelled per revision.
    cuda_graph: bool | None = None
    # Pressure (issue 35): SGLang's forced retraction every `retract_interval` batches
    # (SGLANG_TEST_RETRACT / SGLANG_TEST_RETRACT_INTERVAL), a small token pool
    # (`--max-total-tokens`), and the retractions each cell must see to count (harness/path_proof.py;
    # None: MIN_RETRACTIONS under pressure).
    retract_interval: int | None = None
    max_total_tokens: int | None = None
    min_retractions: int | None = None
    # SGLang's debug invariants (DEBUG_INVARIANTS) in the server's environment; None: on under
    # pressure. A revision without them ignores the variables.
    debug_invariants: bool | None = None
    # SGLang's KV cache canary (issue 48): None is the default, `log` on a deterministic
    # configuration where the revision's --help has --kv-canary (else nothing); "none" turns it
    # off; "log"/"raise" ask for it (a revision without the flag: n/a). Its real-data depth and
    # sweep interval where --help has those flags (capabilities.Capabilities.canary_args).
    kv_canary: str | None = None
    kv_canary_real_data: str | None = None
    kv_canary_sweep_interval: int | None = None

    @property
    def pressure(self) -> bool:
        return self.retract_interval is not None or self.max_total_tokens is not None

    @property
    def invariants_on(self) -> bool:
        return self.pressure if self.debug_invariants is None else self.debug_invariants

    def env(self) -> dict[str, str]:
        """The server environment the features ask for (SGLang's switches, not flags)."""
        env = dict.fromkeys(DEBUG_INVARIANTS, "1") if self.invariants_on else {}
        if self.retract_interval is not None:
            env.update(SGLANG_TEST_RETRACT="1", SGLANG_TEST_RETRACT_INTERVAL=str(self.retract_interval))
        return env


@dataclass(frozen=True)
class ServerConfig:
    """A configuration resolved for one target: model path, features, extra args, env."""

    name: str
    target: str
    model: Path
    features: Features
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    draft_model: Path | None = None

    @property
    def gpus(self) -> int:
        """GPUs one server of this configuration spans on its machine (`gpus_per_server`)."""
        return gpus_per_server(self.args, f"config {self.name!r}")

    @property
    def fingerprint(self) -> str:
        """Hash of what determines the server's behaviour: model config, features, args, env."""
        h = hashlib.sha256()
        for path in (self.model, self.draft_model):
            cfg = path / "config.json" if path else None
            try:
                h.update(read_file(cfg, INPUT_FILE) if cfg and cfg.is_file() else b"-")
            except TooLarge as exc:
                raise UsageError(f"model config: {exc}") from None
        h.update(json.dumps(
            {
                "target": self.target,
                "features": _features_dict(self.features),
                "args": list(self.args),
                "env": {k: v for k, v in sorted(self.env.items())},
            },
            sort_keys=True,
        ).encode())
        return h.hexdigest()[:16]


def flag_value(args: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    """The last value `args` give any of `names` (`--tp 2`, `--tp-size=2`); None if unset."""
    found = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def gpus_per_server(args: tuple[str, ...], where: str = "server args") -> int:
    """How many GPUs one server started with `args` spans, from SGLang's own parallelism flags:
    tensor (`--tp-size`) × pipeline (`--pp-size`) × data-parallel replicas (`--dp-size`, unless
    `--enable-dp-attention` puts the DP ranks inside the TP group); expert (`--ep-size`) and
    context parallelism (`--attn-cp-size` and its kin) run inside the TP group, so the group is
    at least that wide. A server over `--nnodes N` machines spans that ÷ N GPUs on each.
    UsageError for a value that is not a positive integer, names `where`."""
    def size(names: tuple[str, ...]) -> int:
        value = flag_value(args, names)
        if value is None:
            return 1
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_GPUS_PER_SERVER:
            raise UsageError(f"{where}: {names[0]} {value!r}: must be an integer from 1 to {MAX_GPUS_PER_SERVER}")
        return n

    tp = max(size(_TP), size(_EP), size(_CP))
    dp = 1 if _DP_ATTENTION in args else size(_DP)
    total, nodes = tp * dp * size(_PP), size((_NNODES,))
    if total % nodes:
        raise UsageError(f"{where}: {total} GPUs per server do not split over {_NNODES} {nodes}")
    return total // nodes


def _features_dict(f: Features) -> dict[str, Any]:
    d = dict(f.__dict__)
    d["speculative"] = dict(f.speculative.__dict__) if f.speculative else None
    for unset in ("cuda_graph", "retract_interval", "max_total_tokens", "min_retractions", "debug_invariants",
                  "kv_canary", "kv_canary_real_data", "kv_canary_sweep_interval"):
        if d[unset] is None:
            del d[unset]  # fingerprints of configurations that leave them alone are unchanged
    return d
