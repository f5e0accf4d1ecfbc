"""Proof that the path a configuration names ran (issue 35): read from the server's Prometheus
counters before and after each probe.

A configuration that asks for CUDA graphs (`cuda_graph = true`) or for speculative decoding
*demands* proof: a graphs-on row whose decode passes never replayed a graph compares two eager
runs, a speculative row that never verified compares two plain decodes, and either would read
*same* about a path neither side took. Every server gets `--enable-metrics` where the revision's
`--help` has it (`metrics_args`); the pipeline scrapes `/metrics` around each probe
(`Scrape`) and records the counters' growth as the cell's `path` fact (`proof`):

- `passes`: growth of `sglang:cuda_graph_passes_total` per `mode` (`decode_cuda_graph`,
  `decode_none`, `prefill_cuda_graph`, `prefill_none`: SGLang counts one per forward pass);
- `verify_calls`: of `sglang:spec_verify_calls_total`; `cached_tokens`: of
  `sglang:cached_tokens_total`; `decoded_tokens`: generated tokens beyond each finished request's
  first (which prefill makes), of `sglang:generation_tokens_total` − `sglang:num_requests_total`.

A demand is met only by counters that grew: graphs — some decode pass replayed a graph wherever
the probe decoded (by either counter); speculative — some verify call wherever it decoded. A
demand the counters cannot show (no `--enable-metrics` at the revision, a scrape that failed, a
counter the revision does not export) is unmet too: `path.vacuous` says why, and compare.py reads
a cell with it as it reads any vacuous cell, *error* unless the pair reads *different* (a
difference between the sides stands, whichever path they took). So a *same* over a path that did
not run cannot be recorded. A probe that decoded nothing (prefill only) demands nothing of
decode. Configurations with demands carry `KEY_PART` in their cells' store key, so no cell
measured before this proof existed is reused for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness.client import parse_prometheus_samples
from harness.configs import Features
from harness.logparse import retractions
from harness.results import Metric
from harness.verdict_stats import Kind

METRICS_FLAG = "--enable-metrics"
GRAPH_PASSES = "sglang:cuda_graph_passes_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
GENERATED = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
CACHED = "sglang:cached_tokens_total"
# Retracted requests (metrics_collector.py: the counter `num_retracted_reqs_total` is registered
# under the name `sglang:num_retracted_requests_total`); where a revision exports none, the log's
# retraction lines count.
RETRACTED = ("sglang:num_retracted_requests_total",)
COUNTED = (VERIFY_CALLS, GENERATED, REQUESTS, CACHED, *RETRACTED)
FACT = "path"
# In the store key of a configuration with demands: its cells carry the proof.
KEY_PART = ("path-proof", "1")
GRAPHS, SPECULATIVE, RETRACTION = "cuda_graph", "speculative", "retraction"
# Upstream's bar (python/sglang/test/cache_consistency_jitter.py): at least 10 retractions, so
# that a pass under forced retraction is not vacuous.
MIN_RETRACTIONS = 10


def demands(features: Features) -> tuple[str, ...]:
    """What a configuration's cells must show ran: CUDA graphs where it turns them on
    explicitly (the server's default is left to the server), verify rounds where it decodes
    speculatively, retractions where it puts the server under pressure (or names a minimum)."""
    return (*((GRAPHS,) if features.cuda_graph is True else ()),
            *((SPECULATIVE,) if features.speculative is not None else ()),
            *((RETRACTION,) if min_retractions(features) else ()))


def min_retractions(features: Features) -> int:
    """The retractions each cell must see: the configuration's `min_retractions`, else
    MIN_RETRACTIONS under pressure, else none."""
    if features.min_retractions is not None:
        return features.min_retractions
    return MIN_RETRACTIONS if features.pressure else 0


def key_part(features: Features) -> tuple[str, ...]:
    return KEY_PART if demands(features) else ()


def metrics_args(knows: Callable[[str], bool], given: tuple[str, ...]) -> tuple[str, ...]:
    """`--enable-metrics` where the revision knows it and nothing given has it yet."""
    return (METRICS_FLAG,) if knows(METRICS_FLAG) and METRICS_FLAG not in given else ()


def counters(text: str) -> dict[str, float]:
    """The counters the proof reads from a `/metrics` text, summed over ranks and cache
    sources; the graph passes per mode, as `GRAPH_PASSES:<mode>`."""
    out: dict[str, float] = {}
    for name, labels, value in parse_prometheus_samples(text):
        if name == GRAPH_PASSES:
            key = f"{GRAPH_PASSES}:{labels.get('mode', '')}"
        elif name in COUNTED:
            key = name
        else:
            continue
        out[key] = out.get(key, 0.0) + value
    return out


@dataclass
class Scrape:
    """The counters around one probe: `before()` then `after()` on the job's server."""

    read: Callable[[], str | None]  # the /metrics text, None where it cannot be had
    features: Features
    metrics_on: bool
    # The server's log since a mark (its retraction lines count where no counter does).
    log_size: Callable[[], int] = lambda: 0
    log_since: Callable[[int], str] = lambda mark: ""
    start: dict[str, float] | None = None
    mark: int = 0

    def before(self) -> None:
        self.mark = self.log_size()
        self.start = self._read()

    def after(self) -> dict[str, Any]:
        logged = sum(r.requests for r in retractions(self.log_since(self.mark)))
        return proof(demands(self.features), self.metrics_on, self.start, self._read(),
                     min_retractions(self.features), logged)

    def _read(self) -> dict[str, float] | None:
        if not self.metrics_on:
            return None
        try:
            text = self.read()
        except Exception:  # noqa: BLE001 - a failed scrape proves nothing, and says so
            return None
        return counters(text) if text else None


def proof(demanded: tuple[str, ...], metrics_on: bool, before: dict[str, float] | None,
          after: dict[str, float] | None, least_retractions: int = 0, logged_retractions: int = 0
          ) -> dict[str, Any]:
    """The `path` fact of one probe: the counters' growth and, where a demand is unmet, why.
    Retractions are the larger of the counter's growth and the log's retraction lines."""
    fact: dict[str, Any] = {"demands": list(demanded), "metrics": metrics_on}
    if RETRACTION in demanded:
        fact["min_retractions"] = least_retractions
    unmet_retractions = _retraction_unmet(demanded, least_retractions, logged_retractions)
    if before is None or after is None:
        fact["retractions"] = logged_retractions
        others = tuple(d for d in demanded if d != RETRACTION)
        no_counters = (f"no {METRICS_FLAG} at this revision" if not metrics_on
                       else "no sglang: counters could be scraped from /metrics")
        unmet = [*([f"{' and '.join(map(_words, others))} not shown to have run: {no_counters}"] if others else []),
                 *([unmet_retractions] if unmet_retractions else [])]
        if unmet:
            fact["vacuous"] = "; ".join(unmet)
        return fact
    grew = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in sorted({*before, *after})}
    prefix = f"{GRAPH_PASSES}:"
    passes = {k[len(prefix):]: int(v) for k, v in grew.items() if k.startswith(prefix)}
    decoded = int(grew.get(GENERATED, 0.0) - grew.get(REQUESTS, 0.0))
    retracted = max([logged_retractions, *(int(grew.get(name, 0.0)) for name in RETRACTED)])
    fact.update(passes=passes, verify_calls=int(grew.get(VERIFY_CALLS, 0.0)),
                cached_tokens=int(grew.get(CACHED, 0.0)), decoded_tokens=decoded, retractions=retracted)
    unmet_retractions = _retraction_unmet(demanded, least_retractions, retracted)
    unmet = [why for demand in demanded if demand != RETRACTION
             and (why := _unmet(demand, after, passes, decoded, fact["verify_calls"]))]
    unmet += [unmet_retractions] if unmet_retractions else []
    if unmet:
        fact["vacuous"] = "; ".join(unmet)
    return fact


def _unmet(demand: str, after: dict[str, float], passes: dict[str, int], decoded: int,
           verify_calls: int) -> str | None:
    decode_passes = sum(n for mode, n in passes.items() if mode.startswith("decode"))
    if demand == GRAPHS:
        if not any(k.startswith(f"{GRAPH_PASSES}:") for k in after):
            return f"CUDA graphs not shown to have run: the revision exports no {GRAPH_PASSES}"
        if max(decoded, decode_passes) <= 0:
            return None  # nothing decoded: no decode graph to replay
        if passes.get("decode_cuda_graph", 0) <= 0:
            return (f"CUDA graphs on, but none of {decode_passes} decode passes replayed one "
                    f"({decoded} tokens decoded; passes by mode: {_modes(passes)})")
        return None
    if max(decoded, decode_passes) <= 0:
        return None
    if verify_calls <= 0:
        return (f"speculative decoding on, but no verify call ({VERIFY_CALLS} did not grow) "
                f"over {decoded} decoded tokens")
    return None


def _retraction_unmet(demanded: tuple[str, ...], least: int, seen: int) -> str | None:
    if RETRACTION not in demanded or seen >= least:
        return None
    return f"under pressure, but {seen} retractions where at least {least} are required"


# The counters whose growth over a probe is as exact as what it served, under deterministic
# inference with no pressure (no retraction re-runs a request) and no noisy measurement (no
# window cuts a request): the tokens found cached (a flush that left 16 reads 0 → 256 on the kl
# probe's cell), decoded and verified. CUDA-graph passes count batches, which arrival times set.
EXACT_COUNTERS = ("cached_tokens", "decoded_tokens", "verify_calls")
METRIC_PREFIX = "path_"


def counters_decide(features: Features, metrics: Sequence[Metric]) -> bool:
    """Whether a cell's exact counters decide: a deterministic configuration not under pressure,
    whose probe measured nothing noisy there."""
    return features.deterministic and not min_retractions(features) and all(m.kind == Kind.EXACT for m in metrics)


def exact_metrics(facts: dict[str, Any]) -> tuple[Metric, ...]:
    """The path fact's exact counters as metrics (`path_cached_tokens`, …), one value each:
    compared base vs candidate like any exact figure. None where the counters were not read."""
    path = facts.get(FACT)
    if not isinstance(path, dict):
        return ()
    return tuple(Metric(METRIC_PREFIX + name, Kind.EXACT, (float(path[name]),), headline="")
                 for name in EXACT_COUNTERS if isinstance(path.get(name), int))


def unproven(facts: dict[str, Any]) -> str | None:
    """Why a cell's path is not shown to have run (None: shown, or nothing demanded)."""
    path = facts.get(FACT)
    return path.get("vacuous") if isinstance(path, dict) else None


def shown(facts: dict[str, Any]) -> str | None:
    """What proved a cell's demanded paths ran, in words (None: nothing demanded, or unmet).
    A met graph or verify demand implies the counters were read."""
    path = facts.get(FACT)
    if not isinstance(path, dict) or not path.get("demands") or path.get("vacuous"):
        return None
    words = []
    for demand in path["demands"]:
        if demand == GRAPHS:
            decode = sum(n for mode, n in path["passes"].items() if mode.startswith("decode"))
            words.append(f"{path['passes'].get('decode_cuda_graph', 0)} of {decode} decode passes replayed a CUDA graph")
        elif demand == SPECULATIVE:
            words.append(f"{path['verify_calls']} verify calls")
        elif demand == RETRACTION:
            words.append(f"{path['retractions']} retractions (at least {path['min_retractions']})")
    return ", ".join(words)


def merged(facts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One `path` fact of an interleaved probe's rounds: counts summed, every reason kept."""
    paths = [f[FACT] for f in facts if isinstance(f.get(FACT), dict)]
    if not paths:
        return None
    out: dict[str, Any] = {"demands": paths[0]["demands"], "metrics": all(p["metrics"] for p in paths)}
    if all("passes" in p for p in paths):
        passes: dict[str, int] = {}
        for p in paths:
            for mode, n in p["passes"].items():
                passes[mode] = passes.get(mode, 0) + n
        out["passes"] = dict(sorted(passes.items()))
        for key in ("verify_calls", "cached_tokens", "decoded_tokens"):
            out[key] = sum(p[key] for p in paths)
    if all("retractions" in p for p in paths):
        out["retractions"] = sum(p["retractions"] for p in paths)
    if "min_retractions" in paths[0]:
        out["min_retractions"] = paths[0]["min_retractions"]
    reasons = list(dict.fromkeys(p["vacuous"] for p in paths if p.get("vacuous")))
    if reasons:
        out["vacuous"] = "; ".join(reasons)
    return out


def _words(demand: str) -> str:
    return {GRAPHS: "CUDA graphs", SPECULATIVE: "speculative verify", RETRACTION: "retraction"}.get(demand, demand)


def _modes(passes: dict[str, int]) -> str:
    return ", ".join(f"{mode} +{n}" for mode, n in passes.items()) or "none"
