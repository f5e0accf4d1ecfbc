"""throughput: output tokens per second at fixed input/output lengths and several concurrencies.

At each level `c` of `concurrency`, `c` clients (threads) send `requests_per_client` requests
each, back to back; tok/s = completion tokens / wall time of the level. Levels are interleaved
within each of `repeats` rounds, so drift spreads over all of them. Each level is a noisy
metric `tok_s_c<c>` (the highest level first: it decides the verdict unless the suite names
`verdict_metrics`). The pipeline interleaves the rounds of the two sides (both servers up),
and the metrics are paired by round. Each level also has a per-request metric `req_tok_s_c<c>`:
per round, the median over its requests of a request's completion tokens over its own latency.
The round is the unit of replication for both (a round's requests share their batches: they
are not independent samples), so either needs `repeats` rounds that can reach alpha. With `sides_at_once` the pipeline runs each round on both sides
at the same time: on a card that other jobs share (server slots), their load then falls on
both sides alike, which alternating rounds guarantee only over many rounds. Retractions
(`meta_info.num_retractions`), the pools when each retraction happened (its log line, as of
the last Decode line before it) and, where the log has them, the SWA pool's peak usage per
level are recorded as in a PR's throughput table. The probe adds no log flags (logging every
step costs throughput on a GPU): the peak is sampled at whatever
`--decode-log-interval` the server runs with (1 when it shares a server with swa_peak).

With `window_s` a level is measured over a fixed window instead of until every request ends: a
server that thrashes (retracting, its SWA pool full) may not finish a 32k-token round within a
run's limit, and then there is no cell at all. Each request carries its own rid; when the window
closes, no further request is sent and every request still running is aborted (SGLang's
/abort_request), whose answer carries the tokens it had so far. tok/s = tokens generated within
the window / the window (or / the level's wall time, when every request ended sooner); a
request's `req_tok_s_c<c>` = its tokens / its own time in the window. A request cut by the window
is neither an error nor a finding; one the server aborted itself counts as it always did. A
request that runs on through ABORTS_IGNORED aborts and then answers in full is a finding for the
cell: the server does not honour aborts, and its tokens, produced after the window, would
otherwise make that side read faster.
SGLang 0.5.16 answers a cut request in one of two ways: a running one finishes after one more
step (its tokens so far, as usual); one cut in the waiting queue (a retracted request waiting to
run again) is answered by the tokenizer manager with the tokens the scheduler had passed on (a
non-streaming request's whenever its length is a multiple of 50 after a batch, which speculative
rounds may step over), and without `num_retractions`: with a window, a level's retractions are
the larger of the answers' count and the log's `#retracted_reqs`.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Iterable, Sequence

from harness.client import SGLangClient
from harness.errors import ServerFinding, VacuousResult
from harness.logparse import retractions
from harness.params import Param
from harness.plan import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, ValueIndex, descriptive, metric,
                                 parameter, register, summary)
from harness.probes.common import swa_curve
from harness.probes.shared_params import JUDGING, MEASURED, PLACEMENT_SEED, SIDES_AT_ONCE, WORKLOAD, non_empty
from harness.results import Metric, ProbeOutput
from harness.stats import Kind
from harness.textfmt import fmt


def metric_name(level: int) -> str:
    return f"tok_s_c{level}"


def request_metric_name(level: int) -> str:
    return f"req_tok_s_c{level}"


# After the window's aborts, how often the requests still unanswered are aborted again: one sent
# just before the window closed may reach the server after its abort, which SGLang ignores (an
# unknown rid), so it would otherwise run to its end.
ABORT_RETRY_S = 1.0
# A request answered without an abort after this many aborts (two full retry intervals past the
# window's close) ran on: the server does not honour /abort_request, and its tokens, produced
# after the window, must not be counted in it. One or two aborts leave room for a request that
# was finishing anyway when the window closed.
ABORTS_IGNORED = 3


@dataclasses.dataclass(frozen=True)
class RequestResult:
    """One request of a level, as measured."""

    completion_tokens: int
    seconds: float  # from its send to its answer, or to the window's end when the window cut it
    cut: bool  # aborted because the measurement window closed
    retractions: int
    ran_on: bool = False  # answered without an abort after ABORTS_IGNORED aborts: not honoured

    @property
    def tok_s(self) -> float:
        return self.completion_tokens / self.seconds


class MeasurementWindow:
    """The requests of one level that are in flight, and the window's end: once it has
    closed, no request is sent, and every one in flight is aborted by its rid."""

    def __init__(self, client: SGLangClient, window_s: float):
        self.client = client
        self.ends_at = time.perf_counter() + window_s
        self._lock = threading.Lock()
        self._closed = False
        self._in_flight: set[str] = set()
        self._aborts: dict[str, int] = {}  # rid -> aborts sent for it

    def admit(self, rid: str) -> bool:
        """Register a request about to be sent; False once the window has closed."""
        with self._lock:
            if self._closed:
                return False
            self._in_flight.add(rid)
            return True

    def answered(self, rid: str) -> int:
        """Unregister an answered request; how many aborts the window sent it (0: none)."""
        with self._lock:
            self._in_flight.discard(rid)
            return self._aborts.get(rid, 0)

    def close_when_due(self, futures: list[Future]) -> None:
        """Wait for the requests or the window's end, whichever comes first; then abort every
        request still in flight, again every ABORT_RETRY_S until all have answered."""
        left = self.ends_at - time.perf_counter()
        if not wait(futures, timeout=max(left, 0.0)).not_done:
            return
        with self._lock:
            self._closed = True
        while True:
            with self._lock:
                rids = sorted(self._in_flight)
                for rid in rids:  # counted before the abort: its answer may come back at once
                    self._aborts[rid] = self._aborts.get(rid, 0) + 1
            for rid in rids:
                self.client.abort(rid)
            if not wait(futures, timeout=ABORT_RETRY_S).not_done:
                return


def _level(ctx: ProbeContext, level: int, prompts: Sequence[Sequence[int]]) -> dict[str, Any]:
    clients = [SGLangClient(ctx.client.base_url, timeout_s=ctx.client.timeout_s) for _ in range(level)]
    window_s = ctx.param("window_s")

    def one(i: int) -> RequestResult | None:
        # uuid hex: fixed length, so no rid is a prefix of another (SGLang aborts by prefix)
        rid = uuid.uuid4().hex
        if window is not None and not window.admit(rid):
            return None  # the window closed before this request's turn: never sent
        t0 = time.perf_counter()
        gen = clients[i % level].generate(prompts[i % len(prompts)],
                                          max_new_tokens=ctx.workload.output_len, rid=rid)[0]
        ended = time.perf_counter()
        aborts = window.answered(rid) if window is not None else 0
        # Only an abort the window asked for: an abort the server made on its own (out of
        # memory) counts as it always did.
        cut = aborts > 0 and gen.aborted
        if cut:
            ended = min(ended, window.ends_at)
        return RequestResult(gen.completion_tokens, ended - t0, cut,
                             int(gen.meta.get("num_retractions", 0) or 0),
                             ran_on=aborts >= ABORTS_IGNORED and not gen.aborted)

    n = level * ctx.param("requests_per_client")
    ctx.client.flush_cache()
    mark = ctx.server.log_size()
    started = time.time()  # when, so a report can show how the two sides' rounds interleaved
    t0 = time.perf_counter()
    window = MeasurementWindow(ctx.client, window_s) if window_s is not None else None
    with ThreadPoolExecutor(max_workers=level) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
        if window is not None:
            window.close_when_due(futures)
        answered = [r for r in (f.result() for f in futures) if r is not None]
    wall = time.perf_counter() - t0
    log = ctx.server.log_since(mark)
    curve = swa_curve(log)
    events = retractions(log)
    answered_retractions = sum(r.retractions for r in answered)
    if window is not None:
        # A request cut in the waiting queue answers without `num_retractions`, so the answers
        # undercount; the log's `#retracted_reqs` may too (a server that logs less): both are
        # lower bounds of the retractions in the window.
        answered_retractions = max(answered_retractions, sum(e.requests for e in events))
    return {
        "concurrency": level,
        "started_at": round(started, 3),
        "requests": n,
        **level_rates(answered, wall, window_s),
        "retractions": answered_retractions,
        "retraction_events": [dataclasses.asdict(r) for r in events],
        "swa_peak_usage": max(curve.usage) if curve else None,
        "swa_peak_tokens": max(curve.held) if curve else None,
    }


def level_rates(answered: list[RequestResult], wall: float, window_s: float | None) -> dict[str, Any]:
    """A level's tokens and rates. With a window: over the window (or the level's wall time,
    if every request ended sooner), and vacuous when no request produced a token in it."""
    tokens = sum(r.completion_tokens for r in answered)
    rates: dict[str, Any] = {
        "completion_tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "request_tok_s": [r.tok_s for r in answered],
    }
    if window_s is None:
        return rates
    ran_on = [r for r in answered if r.ran_on]
    if ran_on:
        # Its tokens came after the window: counted in it they would make this side faster.
        raise ServerFinding(
            f"the server did not honour /abort_request: {len(ran_on)} of {len(answered)} requests ran on "
            f"after the {window_s:g} s window closed and {ABORTS_IGNORED} aborts, answering "
            f"{sum(r.completion_tokens for r in ran_on)} tokens {max(r.seconds for r in ran_on) - window_s:.1f} s "
            f"late (not counted: a window holds only tokens produced in it)",
            tuple({"completion_tokens": r.completion_tokens, "seconds": r.seconds} for r in ran_on))
    if tokens == 0:
        raise VacuousResult(f"no request produced a token within the {window_s:g} s window "
                            f"({len(answered)} sent)")
    measured_s = min(wall, window_s)
    return {**rates, "tok_s": tokens / measured_s, "window_s": window_s, "measured_s": measured_s,
            "requests_sent": len(answered), "request_cut": [r.cut for r in answered],
            "requests_cut": sum(r.cut for r in answered)}


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


def highest_first(levels: Iterable[int]) -> list[int]:
    """The concurrency levels in metric order: the highest (the primary metric's) first, then
    the rest ascending; `_output` and `planned` (the design check) must agree on it."""
    ordered = sorted(set(levels))
    return [ordered[-1], *ordered[:-1]]


def _output(samples: list[dict[str, Any]]) -> ProbeOutput:
    levels = sorted({s["concurrency"] for s in samples})
    ordered = highest_first(levels)
    # Value i is round i on both sides; interleaved, the two sides' round i are neighbours in
    # time, so pairing by round takes the run's drift out of the comparison.
    metrics = tuple(
        Metric(metric_name(c), Kind.NOISY, tuple(s["tok_s"] for s in samples if s["concurrency"] == c),
               unit="tok/s", better="higher", headline="median", paired=True)
        for c in ordered
    ) + tuple(
        # The round is the unit of replication: a round's requests share its batches, so they
        # are one observation (their median), never as many independent samples as requests.
        Metric(request_metric_name(c), Kind.NOISY,
               tuple(statistics.median(s["request_tok_s"]) for s in samples if s["concurrency"] == c),
               unit="tok/s", better="higher", headline="median", paired=True)
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
    if any("window_s" in s for s in samples):
        facts["window_s"] = samples[0]["window_s"]
        facts["requests_cut"] = sum(s["requests_cut"] for s in samples)
        facts["requests_sent"] = sum(s["requests_sent"] for s in samples)
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


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Every level's two metrics, the highest level first, each paired by round: `repeats` pairs."""
    ordered = highest_first(params["concurrency"])
    return tuple(PlannedMetric(name(c), Kind.NOISY, paired=True, key="repeats")
                 for name in (metric_name, request_metric_name) for c in ordered)


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    levels = facts.get("concurrency") or []
    parts = [f"c{c} {fmt(facts.get(f'{metric_name(c)}_median'))}" for c in levels]
    text = " · ".join(parts) + " tok/s"
    usage = [facts[f"swa_peak_usage_c{c}"] for c in levels if f"swa_peak_usage_c{c}" in facts]
    if usage:
        text += f", SWA peak usage {max(usage):.2f}"
    if "window_s" in facts:
        text += (f" in a {fmt(facts['window_s'])} s window ({fmt(facts['requests_cut'])} of "
                 f"{fmt(facts['requests_sent'])} requests cut)")
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
    # 6: the fewest rounds whose paired Wilcoxon p can go below 0.05 (2/2^6); the suite's design
    # check refuses fewer at that alpha.
    Param("repeats", int, 6, "rounds over all levels (the unit of replication: metrics pair by round)",
          MEASURED, low=1, high=1000),
    SIDES_AT_ONCE, PLACEMENT_SEED,
    Param("window_s", float, None, "measure each level for this many seconds, aborting the "
          "requests still running (None: until every request ends)", MEASURED,
          low=0.1, high=86_400.0),
    Param("warmup", int, 1, "requests sent before measuring", MEASURED, low=0, high=1000),
    *JUDGING,
)
# Every metric holds one value per round (per-request tok/s too: a round's median).
ROUND = ValueIndex("round", lambda samples, i: f"round {i}")

FIGURES = (
    metric("tok_s_c*"), metric("req_tok_s_c*"),
    *summary("tok_s_c*", "tok_s_c*_median"),
    *parameter("concurrency", "repeats", "window_s"),
    *descriptive("set by the server's timing under load, not by what it serves: pressure rows count "
                 "retractions exactly (swa_peak)", "retractions", "retraction_events", "swa_tokens_at_retraction",
                 "swa_peak_usage_c*"),
    *descriptive("how many requests the window cut, set by timing", "requests_cut", "requests_sent"),
)

PROBE = register(ProbeKind("throughput", run, "tok/s at fixed lengths and several concurrencies (noisy)",
                           params=PARAMS, describe=describe, merge=merge, planned=planned,
                           values=lambda metric: ROUND, figures=FIGURES))
