"""throughput: output tokens per second at fixed input/output lengths and several concurrencies.

At each level `c` of `concurrency`, `c` clients (threads) send `requests_per_client` requests
each, back to back; tok/s = completion tokens / wall time of the level. Levels are interleaved
within each of `repeats` rounds, so drift spreads over all of them. Each level is a noisy
metric `tok_s_c<c>` (the highest level first: it decides the verdict unless the suite names
`verdict_metrics`). The pipeline interleaves the rounds of the two sides (both servers up),
and the metrics are paired by round. Each level also has a per-request metric `req_tok_s_c<c>`
(a request's completion tokens over its own latency, every request of every round: unpaired),
which decides a comparison with few rounds, e.g. one round of a 32k-token generation per side
(requests of one round share their batch, so they are not fully independent: name it in
`verdict_metrics` knowingly). With `sides_at_once` the pipeline runs each round on both sides
at the same time: on a card that other jobs share (server slots), their load then falls on
both sides alike, which alternating rounds guarantee only over many rounds. Retractions (`meta_info.num_retractions`), the pools when each
retraction happened (its log line, as of the last Decode line before it) and, where the log has
them, the SWA pool's peak usage per level are recorded as in a PR's throughput table. The probe adds
no log flags (logging every step costs throughput on a GPU): the peak is sampled at whatever
`--decode-log-interval` the server runs with (1 when it shares a server with swa_peak).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from harness.client import Generation, SGLangClient
from harness.logparse import retractions
from harness.params import Param
from harness.probes.base import ProbeContext, ProbeKind, register
from harness.probes.common import swa_curve
from harness.probes.shared_params import JUDGING, MEASURED, SIDES_AT_ONCE, WORKLOAD, non_empty
from harness.report.format import fmt
from harness.results import Metric, ProbeOutput
from harness.stats import Kind


def metric_name(level: int) -> str:
    return f"tok_s_c{level}"


def request_metric_name(level: int) -> str:
    return f"req_tok_s_c{level}"


def _level(ctx: ProbeContext, level: int, prompts: Sequence[Sequence[int]]) -> dict[str, Any]:
    clients = [SGLangClient(ctx.client.base_url, timeout_s=ctx.client.timeout_s) for _ in range(level)]

    def one(i: int) -> tuple[Generation, float]:
        t0 = time.perf_counter()
        gen = clients[i % level].generate(prompts[i % len(prompts)],
                                          max_new_tokens=ctx.workload.output_len)[0]
        return gen, time.perf_counter() - t0

    n = level * ctx.param("requests_per_client")
    ctx.client.flush_cache()
    mark = ctx.server.log_size()
    started = time.time()  # when, so a report can show how the two sides' rounds interleaved
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=level) as pool:
        timed = list(pool.map(one, range(n)))
    wall = time.perf_counter() - t0
    log = ctx.server.log_since(mark)
    curve = swa_curve(log)
    gens = [gen for gen, _ in timed]
    tokens = sum(g.completion_tokens for g in gens)
    return {
        "concurrency": level,
        "started_at": round(started, 3),
        "requests": n,
        "completion_tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "request_tok_s": [gen.completion_tokens / latency for gen, latency in timed],
        "retractions": sum(int(g.meta.get("num_retractions", 0) or 0) for g in gens),
        "retraction_events": [dataclasses.asdict(r) for r in retractions(log)],
        "swa_peak_usage": max(curve.usage) if curve else None,
        "swa_peak_tokens": max(curve.held) if curve else None,
    }


def run(ctx: ProbeContext) -> ProbeOutput:
    levels = sorted(set(ctx.param("concurrency")))
    rounds = ctx.repeat_indices()
    prompts = list(ctx.workload.prompts)
    if not rounds or rounds[0] == 0:  # warm up once, before the first round
        for _ in range(ctx.param("warmup")):
            ctx.client.generate(prompts[0], max_new_tokens=ctx.workload.output_len)
    samples = []
    for rep in rounds:
        for level in levels:
            samples.append({"repeat": rep, **_level(ctx, level, prompts)})
            ctx.advance(len(samples), len(rounds) * len(levels))
    return _output(samples)


def merge(outputs: list[ProbeOutput]) -> ProbeOutput:
    return _output([s for out in outputs for s in out.samples])


def _output(samples: list[dict[str, Any]]) -> ProbeOutput:
    levels = sorted({s["concurrency"] for s in samples})
    ordered = [levels[-1], *levels[:-1]]
    # Value i is round i on both sides; interleaved, the two sides' round i are neighbours in
    # time, so pairing by round takes the run's drift out of the comparison.
    metrics = tuple(
        Metric(metric_name(c), Kind.NOISY, tuple(s["tok_s"] for s in samples if s["concurrency"] == c),
               unit="tok/s", better="higher", headline="median", paired=True)
        for c in ordered
    ) + tuple(
        Metric(request_metric_name(c), Kind.NOISY,
               tuple(v for s in samples if s["concurrency"] == c for v in s["request_tok_s"]),
               unit="tok/s", better="higher", headline="median")
        for c in ordered
        if all("request_tok_s" in s for s in samples)  # cells stored before it was measured lack it
    )
    return ProbeOutput(samples=tuple(samples), metrics=metrics, facts=_facts(samples, levels))


def _facts(samples: list[dict[str, Any]], levels: list[int]) -> dict[str, Any]:
    facts: dict[str, Any] = {"concurrency": levels, "repeats": len(samples) // len(levels),
                             "retractions": sum(s["retractions"] for s in samples)}
    events = [e for s in samples for e in s.get("retraction_events", [])]
    swa_at = [e["swa_tokens"] for e in events if e["swa_tokens"] is not None]
    if events:
        facts["retraction_events"] = len(events)
    if swa_at:
        # The PR's "retracted at exactly 77,824 tokens of SWA use": the pool's size in practice.
        facts["swa_tokens_at_retraction"] = max(swa_at)
    for c in levels:
        rows = [s for s in samples if s["concurrency"] == c]
        facts[f"{metric_name(c)}_median"] = statistics.median(s["tok_s"] for s in rows)
        usages = [s["swa_peak_usage"] for s in rows if s["swa_peak_usage"] is not None]
        if usages:
            facts[f"swa_peak_usage_c{c}"] = max(usages)
    return facts


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    levels = facts.get("concurrency") or []
    parts = [f"c{c} {fmt(facts.get(f'{metric_name(c)}_median'))}" for c in levels]
    text = " · ".join(parts) + " tok/s"
    usage = [facts[f"swa_peak_usage_c{c}"] for c in levels if f"swa_peak_usage_c{c}" in facts]
    if usage:
        text += f", SWA peak usage {max(usage):.2f}"
    text += f", {fmt(facts.get('retractions'))} retractions"
    if "swa_tokens_at_retraction" in facts:
        text += f" (at {fmt(facts['swa_tokens_at_retraction'])} SWA tokens)"
    return text


PARAMS = (
    *WORKLOAD,
    Param("concurrency", list[int], [1, 4, 8], "concurrent clients per level", MEASURED,
          low=1, high=4096, check=non_empty),
    Param("requests_per_client", int, 1, "requests each client sends per level", MEASURED,
          low=1, high=100_000),
    Param("repeats", int, 3, "rounds over all levels", MEASURED, low=1, high=1000),
    SIDES_AT_ONCE,
    Param("warmup", int, 1, "requests sent before measuring", MEASURED, low=0, high=1000),
    *JUDGING,
)
PROBE = register(ProbeKind("throughput", run, "tok/s at fixed lengths and several concurrencies (noisy)",
                           params=PARAMS, describe=describe, merge=merge))
