"""What a revision's server understands, read from its `--help`, and features → flags.

Flag spellings move between SGLang revisions (`--mamba-scheduler-strategy` became
`--mamba-radix-cache-strategy`; `--disable-cuda-graph` gave way to per-phase backends). Each
feature lists the spellings it accepts, newest first; the first one the revision knows wins.
A feature with no known spelling makes the configuration "n/a at this revision".
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import LaunchError
from harness.paths import sha_cache_file
from harness.result_files import atomic_write_text
from harness.suite import Features
from harness.redaction import environment_secrets, help_secret_flags, scrub
from harness.targets import Target

_FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
_CHOICES = re.compile(r"(--[a-z0-9][a-z0-9-]*)(?:[ =]\{([^}]*)\})")

MAMBA_STRATEGY_FLAGS = ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy")
OVERLAP_OFF_FLAG = "--disable-overlap-schedule"
# SGLang's KV cache canary (upstream `server_args.py`; `shared/reference/sglang-after-0.5.21.md`).
# detcheck's defaults: the first 16 bytes of each slot hashed, every cached slot swept after each
# forward step (a cached slot no hit reads is checked only by the sweep).
KV_CANARY_FLAG, KV_CANARY_REAL_DATA_FLAG, KV_CANARY_SWEEP_FLAG = (
    "--kv-canary", "--kv-canary-real-data", "--kv-canary-sweep-interval")
KV_CANARY_DEFAULT_REAL_DATA, KV_CANARY_DEFAULT_SWEEP = "partial", 1
POOL_STRATEGY = {"no_buffer": "no_buffer", "static": "extra_buffer", "lazy": "extra_buffer_lazy"}
# Graphs off, newest spelling first: per-phase backends set to `disabled`, then per-phase
# switches, then the single switch (deprecated from SGLang 0.5.14, still accepted for a while).
GRAPH_BACKEND_FLAGS = ("--cuda-graph-backend-decode", "--cuda-graph-backend-prefill")
GRAPH_PHASE_FLAGS = ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")
GRAPH_ALL_FLAG = "--disable-cuda-graph"


class NotExpressible(Exception):
    """The revision has no flag for a feature the configuration asks for."""


@dataclass(frozen=True)
class Capabilities:
    flags: frozenset[str]
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Flags whose value the help calls a secret (a password, an API key): masked like --api-key.
    secret_flags: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, help_text: str) -> Capabilities:
        flags = frozenset(_FLAG.findall(help_text))
        choices: dict[str, tuple[str, ...]] = {}
        # argparse wraps long choice lists over lines; join them before matching.
        flat = re.sub(r"\s*\n\s*", " ", help_text)
        for flag, body in _CHOICES.findall(flat):
            choices.setdefault(flag, tuple(c.strip() for c in body.split(",") if c.strip()))
        return cls(flags=flags, choices=choices, secret_flags=help_secret_flags(help_text))

    def knows(self, flag: str) -> bool:
        return flag in self.flags

    def first_known(self, *spellings: str) -> str | None:
        return next((s for s in spellings if s in self.flags), None)

    def allows(self, flag: str, value: str) -> bool:
        known = self.choices.get(flag)
        return known is None or value in known

    def canary_args(self, features: Features) -> list[str]:
        """SGLang's KV cache canary as a second oracle (issue 48): logging on a deterministic
        configuration where this revision's --help has --kv-canary, with real data and a sweep
        where it has those flags too (every violation it logs is a finding of the row:
        pipeline/outcome.py). A configuration that asks for it by name needs the flag."""
        mode = features.kv_canary or ("log" if features.deterministic else "none")
        if mode == "none":
            return []
        if not self.knows(KV_CANARY_FLAG):
            if features.kv_canary is None:
                return []
            raise NotExpressible(f"the KV canary ({KV_CANARY_FLAG} {mode}) is not in this revision's --help")
        args = [KV_CANARY_FLAG, mode]
        for flag, value in ((KV_CANARY_REAL_DATA_FLAG, features.kv_canary_real_data or KV_CANARY_DEFAULT_REAL_DATA),
                            (KV_CANARY_SWEEP_FLAG, str(features.kv_canary_sweep_interval or KV_CANARY_DEFAULT_SWEEP))):
            if self.knows(flag):
                args += [flag, value]
        return args

    def feature_args(self, features: Features, draft_model: Path | None) -> tuple[str, ...]:
        """The flags for `features` at this revision; raises NotExpressible with the reason."""
        args: list[str] = []
        if features.deterministic:
            args += [self._need("deterministic inference", "--enable-deterministic-inference")]
        if features.disable_radix_cache:
            args += [self._need("disabling the radix cache", "--disable-radix-cache")]
        if features.swa_ratio is not None:
            args += [self._need("an SWA ratio", "--swa-full-tokens-ratio"), str(features.swa_ratio)]
        if features.mamba_pool == "unified":
            args += [self._need("the unified Mamba pool", "--enable-unified-memory")]
        elif features.mamba_pool is not None:
            flag = self._need(f"the {features.mamba_pool} Mamba pool", *MAMBA_STRATEGY_FLAGS)
            strategy = POOL_STRATEGY[features.mamba_pool]
            if not self.allows(flag, strategy):
                raise NotExpressible(f"{flag} has no choice {strategy!r} at this revision")
            args += [flag, strategy]
            if strategy == "no_buffer" and self.knows(OVERLAP_OFF_FLAG):
                args += [OVERLAP_OFF_FLAG]  # SGLang 0.5.17 asserts it for no_buffer
        if features.mamba_track_interval is not None:
            args += [self._need("a Mamba track interval", "--mamba-track-interval"),
                     str(features.mamba_track_interval)]
        if features.cuda_graph is False:
            args += self.graphs_off_args()
        if features.max_total_tokens is not None:
            args += [self._need("a token pool size", "--max-total-tokens"), str(features.max_total_tokens)]
        args += self.canary_args(features)
        spec = features.speculative
        if spec is not None:
            flag = self._need("speculative decoding", "--speculative-algorithm")
            if not self.allows(flag, spec.algorithm):
                raise NotExpressible(f"speculative algorithm {spec.algorithm} unknown at this revision")
            args += [flag, spec.algorithm]
            if draft_model is not None:
                args += [self._need("a draft model", "--speculative-draft-model-path"), str(draft_model)]
            if spec.multi_layer:
                args += [self._need("multi-layer EAGLE", "--enable-multi-layer-eagle")]
            for value, name, spelling in (
                (spec.num_steps, "draft steps", "--speculative-num-steps"),
                (spec.eagle_topk, "EAGLE top-k", "--speculative-eagle-topk"),
                (spec.num_draft_tokens, "draft tokens", "--speculative-num-draft-tokens"),
            ):
                if value is not None:
                    args += [self._need(name, spelling), str(value)]
            if spec.block_size is not None:
                block_flag = {"DFLASH": "--speculative-dflash-block-size",
                              "DSPARK": "--speculative-dspark-block-size"}.get(spec.algorithm)
                if block_flag is None:
                    raise NotExpressible(f"block_size applies to DFLASH/DSPARK, not {spec.algorithm}")
                args += [self._need("a draft block size", block_flag), str(spec.block_size)]
        return tuple(args)

    def graphs_off_args(self) -> tuple[str, ...]:
        """The flags that turn CUDA graphs off in every phase at this revision. Graphs on is the
        server's default and needs no flag."""
        if all(self.knows(f) and self.choices.get(f) and self.allows(f, "disabled")
               for f in GRAPH_BACKEND_FLAGS):
            return tuple(a for f in GRAPH_BACKEND_FLAGS for a in (f, "disabled"))
        if all(self.knows(f) for f in GRAPH_PHASE_FLAGS):
            return GRAPH_PHASE_FLAGS
        if self.knows(GRAPH_ALL_FLAG):
            # Plus a lone per-phase switch, if any: the single switch may leave that phase on.
            return (GRAPH_ALL_FLAG, *(f for f in GRAPH_PHASE_FLAGS if self.knows(f)))
        raise NotExpressible("no flag to turn CUDA graphs off at this revision (looked for "
                             f"{' / '.join((*GRAPH_BACKEND_FLAGS, *GRAPH_PHASE_FLAGS, GRAPH_ALL_FLAG))})")

    def check_args(self, args: tuple[str, ...]) -> None:
        """Every literal flag in a configuration's args must exist at this revision."""
        for a in args:
            if a.startswith("--"):
                flag = a.split("=", 1)[0]
                if flag not in self.flags:
                    raise NotExpressible(f"flag {flag} unknown at this revision")

    def _need(self, what: str, *spellings: str) -> str:
        flag = self.first_known(*spellings)
        if flag is None:
            raise NotExpressible(f"no flag for {what} at this revision (looked for {' / '.join(spellings)})")
        return flag


_help_locks: dict[tuple[str, str | None], threading.Lock] = {}
_help_locks_guard = threading.Lock()


def revision_capabilities(target: Target, sha: str | None, worktree: Path | None,
                          timeout_s: float) -> Capabilities:
    """The revision's `--help`, read once per (target, sha) and kept in the cache. Jobs of one
    revision that start at once wait for the first one's read instead of each running it."""
    with _help_locks_guard:
        lock = _help_locks.setdefault((target.name, sha), threading.Lock())
    with lock:
        return _read_capabilities(target, sha, worktree, timeout_s)


def _read_capabilities(target: Target, sha: str | None, worktree: Path | None, timeout_s: float) -> Capabilities:
    """A cached text that lists no flags (a file left empty by a crash or a full disk) is read
    again: a bad cache file must never make a configuration look n/a."""
    cache = sha_cache_file("help", target.name, sha, ".txt")
    if cache is not None and cache.is_file():
        caps = Capabilities.parse(cache.read_text(errors="replace"))
        if caps.knows("--model-path"):
            return caps
    code, text = target.read_help(worktree, {}, timeout_s)
    text = scrub(text, environment_secrets(dict(os.environ)))  # cached, and kept in a failure's tail
    caps = Capabilities.parse(text)
    if code != 0 or not caps.knows("--model-path"):
        what = (f"timed out after {timeout_s:.0f} s" if code is None else
                f"exit code {code}" if code != 0 else "no --model-path in its output")
        raise LaunchError(f"`{target.module} --help` failed ({what})",
                          "\n".join(text.splitlines()[-30:]), exit_code=code)
    if cache is not None:
        atomic_write_text(cache, text)
    return caps
