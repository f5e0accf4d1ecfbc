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
run's limit, and then there is no cell at all. Each request carries its own rid and is streamed
(`"stream": true`), so its tokens are counted by when they arrived, not by when its answer did:
only those streamed before the window's end count. A request is admitted on the window's clock
under the lock that closes it, so none starts at or after the end however late the closing
thread runs, and every duration is positive by construction (one that is not is a finding, never
a sample). When the window closes, no further request is sent and every request still running is
aborted (SGLang's /abort_request). tok/s = tokens streamed within the window / the window (or /
the level's wall time, when every request ended sooner); a request's `req_tok_s_c<c>` = its
tokens in the window / its own time in it. A request cut by the window is neither an error nor a
finding; one the server aborted itself counts as it always did. A cut request whose stream ends
later than about one decode step after the server answered the abort that reached it
(ABORT_GRACE_STEPS × the level's longest gap between events, at least ABORT_GRACE_MIN_S), or
still streams ABORT_GIVE_UP_S after that answer (then the harness closes it), is a finding for the
cell, saying how late: the server does not honour aborts in time. The abort's own round trip is
not part of it: on a loaded host /abort_request itself may take longer than a step to be answered
(the host's doing, not the server's), and a server that answers it at once but applies it late
is still late by the time it took after its answer. Its tokens after the window would not have counted anyway, so a
late abort never makes a side read faster.
SGLang 0.5.16 answers a cut request in one of two ways: a running one finishes after one more
step (its tokens so far, as usual); one cut in the waiting queue (a retracted request waiting to
run again) is answered by the tokenizer manager with the tokens the scheduler had passed on (a
streamed request's: all of them, every batch is passed on), and without `num_retractions`: with a window, a level's retractions are
the larger of the answers' count and the log's `#retracted_reqs`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Generator, Iterable, Sequence

from harness.client import Generation, SGLangClient
from harness.errors import ServerFinding, VacuousResult
from harness.logparse import retractions
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, Reproduction, ValueIndex, descriptive, metric,
                                 parameter, register, summary)
from harness.probes.common import swa_curve
from harness.probes.shared_params import JUDGING, MEASURED, PLACEMENT_SEED, SIDES_AT_ONCE, WORKLOAD, non_empty
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer
from harness.textfmt import fmt
from harness.verdict_stats import Kind


def metric_name(level: int) -> str:
    return f"tok_s_c{level}"


def request_metric_name(level: int) -> str:
    return f"req_tok_s_c{level}"


# After the window's aborts, how often the requests still streaming are aborted again: one sent
# just before the window closed may reach the server after its abort, which SGLang ignores (an
# unknown rid), so it would otherwise run to its end.
ABORT_RETRY_S = 1.0
# An abort may take effect this many decode steps after it reached its request (the step running
# when it arrives, then the one after which SGLang ends the request), a step being the longest
# gap between two events of any stream of the level (MeasurementWindow.allowed_s), and never less than
# ABORT_GRACE_MIN_S: on a loaded host the client reads a stream's last event late (a healthy
# reference server's aborts, timed from when they were sent, answered in up to 0.34 s on the CI
# machine with two CPU burners beside it, once 0.85 s; 0.25 s made one false finding in 26 A/A
# cells there). The lateness is timed from the abort's answer, so its round trip is not in it.
ABORT_GRACE_STEPS = 2
ABORT_GRACE_MIN_S = 0.5
# After the server answered the abort that reached it, how long a cut request's stream is still
# read (at least twice the grace); then the harness gives up and closes the connection, which
# SGLang takes as an abort. Timed from that answer, as the lateness is: the close aborts the
# requests one after another, and on a loaded host the last abort may be answered seconds later.
ABORT_GIVE_UP_S = 3.0

Clock = Callable[[], float]


@dataclasses.dataclass
class AbortCall:
    """One /abort_request sent for a rid, on the window's clock: when it was sent, and when the
    server answered it (None while the call is still out)."""

    sent: float
    answered: float | None = None

    def ended_after_answer(self, ended: float) -> float:
        """How long after this abort's answer its request's stream ended (at `ended`): 0 when it
        ended first (the answer still out, or read after the stream's end on a loaded client)."""
        answered = self.answered  # read once: the closing thread may set it meanwhile
        return 0.0 if answered is None else max(0.0, ended - answered)

# Request i of a level, sent with its rid: the server's streamed events, as they arrive.
Streamer = Callable[[int, str], Generator[Generation, None, None]]


@dataclasses.dataclass(frozen=True)
class RequestResult:
    """One request of a level, as measured."""

    completion_tokens: int  # with a window: those streamed before the window's end
    seconds: float  # from its admission to its answer, or to the window's end when it ran past it
    cut: bool  # still running at the window's end
    retractions: int
    # Cut, after an abort reached it (its first event came before the abort was sent): how long
    # after the server answered that abort its stream ended (0 when it ended before the answer
    # came back); None when no abort is known to have reached it.
    abort_answer_s: float | None = None
    tokens_after_window: int = 0  # streamed after the window's end: never counted in it
    given_up: bool = False  # still streaming when the harness gave up on its abort

    @property
    def tok_s(self) -> float:
        return self.completion_tokens / self.seconds


class MeasurementWindow:
    """The requests of one level that are in flight, and the window's end. Admission and the
    window's end are read on one clock under one lock: no request is admitted at or after the
    end, however late the closing thread runs, so every admitted request starts inside the window.
    Once closed, every request in flight is aborted by its rid, again every ABORT_RETRY_S."""

    def __init__(self, abort: Callable[[str], None], window_s: float, clock: Clock = time.perf_counter):
        self._abort = abort
        self._clock = clock
        self.window_s = window_s
        self.ends_at = clock() + window_s
        self._lock = threading.Lock()
        self._closed = False
        self._in_flight: set[str] = set()
        self._aborts: dict[str, list[AbortCall]] = {}  # rid -> each abort sent for it
        self._last_event: dict[str, float] = {}
        self._longest_step_s = 0.0
        # How long after the answer to an abort that reached it a request may still stream: set
        # at the close.
        self.give_up_after_s: float | None = None

    def admit(self, rid: str) -> float | None:
        """Register a request about to be sent: its start, before the window's end by
        construction; None once the end has come (closed or not: the clock decides)."""
        with self._lock:
            now = self._clock()
            if self._closed or now >= self.ends_at:
                return None
            self._in_flight.add(rid)
            return now

    def event(self, rid: str) -> float:
        """An event of `rid`'s stream arrived: when, on the window's clock. Gaps between a
        stream's events are the level's decode steps (the grace of an abort), those after the
        end included: a host loaded at the close slows the steps that end the cut requests too."""
        with self._lock:
            now = self._clock()
            last = self._last_event.get(rid)
            if last is not None:
                self._longest_step_s = max(self._longest_step_s, now - last)
            self._last_event[rid] = now
            return now

    def now(self) -> float:
        return self._clock()

    @property
    def allowed_s(self) -> float:
        """How long after its abort's answer a cut request's stream may end: ABORT_GRACE_STEPS of
        the level's longest step so far (the step running when the abort arrives, then the one
        after which SGLang ends the request), at least ABORT_GRACE_MIN_S. Read once every stream
        has ended, it holds the steps that ended them: a server slowed by its host after the
        close is not late for it, while one that goes on generating after the answer (steps as
        long as before) is, by as many steps as it made."""
        with self._lock:
            return max(ABORT_GRACE_MIN_S, ABORT_GRACE_STEPS * self._longest_step_s)

    def answered(self, rid: str) -> list[AbortCall]:
        """Unregister an answered request: each abort sent for it (none: it ended first)."""
        with self._lock:
            self._in_flight.discard(rid)
            self._last_event.pop(rid, None)
            return self._aborts.pop(rid, [])

    def close_when_due(self, futures: list[Future]) -> None:
        """Wait for the requests or the window's end, whichever comes first; then close and
        abort every request still in flight, again every ABORT_RETRY_S until all have ended."""
        if not wait(futures, timeout=max(self.ends_at - self._clock(), 0.0)).not_done:
            return
        self.close()
        while wait(futures, timeout=ABORT_RETRY_S).not_done:
            self._abort_in_flight()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            allowed_s = max(ABORT_GRACE_MIN_S, ABORT_GRACE_STEPS * self._longest_step_s)
            self.give_up_after_s = max(ABORT_GIVE_UP_S, 2 * allowed_s)
        self._abort_in_flight()

    def give_up_at(self, rid: str, first_event_at: float | None) -> float | None:
        """When the harness stops reading `rid`'s stream: give_up_after_s after the server
        answered the first abort that surely reached it (sent after the request's first event);
        None until one has been answered. Timed per request, from its own abort's answer, never
        from the close: the close aborts the requests one after another, and on a loaded host
        each /abort_request may take most of a second to be answered, so the last request's abort
        may be answered seconds after the close (a request streaming then is not late)."""
        with self._lock:
            after = self.give_up_after_s
            for call in self._aborts.get(rid, ()):
                if (after is not None and first_event_at is not None and call.sent >= first_event_at
                        and call.answered is not None):
                    return call.answered + after
        return None

    def _abort_in_flight(self) -> None:
        with self._lock:
            rids = sorted(self._in_flight)
        for rid in rids:
            # Noted before its abort (the stream may end before the call returns), each when it is
            # sent: the aborts go one after another, and on a loaded host the last may leave much
            # later; and when it was answered, which the stream's lateness is timed from.
            with self._lock:
                call = AbortCall(self._clock())
                self._aborts.setdefault(rid, []).append(call)
            self._abort(rid)
            with self._lock:
                call.answered = self._clock()

    def stream(self, rid: str, events: Generator[Generation, None, None], started: float) -> RequestResult:
        """Read one admitted request's events: the tokens streamed before the window's end count;
        once the harness gives up on its abort, the stream is closed unread."""
        in_window, first_event_at, last, given_up = 0, None, None, False
        with contextlib.closing(events):  # on giving up: closes the connection, an abort to SGLang
            for gen in events:
                at = self.event(rid)
                first_event_at = at if first_event_at is None else first_event_at
                if at < self.ends_at:
                    in_window = gen.completion_tokens
                last = gen
                give_up_at = self.give_up_at(rid, first_event_at)
                if give_up_at is not None and at >= give_up_at and gen.meta.get("finish_reason") is None:
                    given_up = True
                    break
        ended = self._clock()
        calls = self.answered(rid)
        # An abort sent before the request's first event may have reached the server before the
        # request did (SGLang then ignores it): the first one after that event surely reached it.
        reached = next((c for c in calls if first_event_at is not None and c.sent >= first_event_at), None)
        total = last.completion_tokens if last is not None else 0
        return RequestResult(in_window, min(ended, self.ends_at) - started, cut=ended >= self.ends_at,
                             retractions=int((last.meta.get("num_retractions", 0) if last else 0) or 0),
                             abort_answer_s=None if reached is None else reached.ended_after_answer(ended),
                             tokens_after_window=total - in_window, given_up=given_up)


def run_window(window: MeasurementWindow, streamer: Streamer, n: int, workers: int) -> list[RequestResult]:
    """`n` requests from `workers` clients back to back within `window`: each one admitted
    before it is sent, none once the window has ended."""
    def one(i: int) -> RequestResult | None:
        # uuid hex: fixed length, so no rid is a prefix of another (SGLang aborts by prefix)
        rid = uuid.uuid4().hex
        started = window.admit(rid)
        if started is None:
            return None  # the window ended before this request's turn: never sent
        return window.stream(rid, streamer(i, rid), started)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
        window.close_when_due(futures)
        return [r for r in (f.result() for f in futures) if r is not None]


def run_to_the_end(send: Callable[[int], Generation], n: int, workers: int) -> list[RequestResult]:
    """`n` requests from `workers` clients back to back, each to its end (no window)."""
    def one(i: int) -> RequestResult:
        t0 = time.perf_counter()
        gen = send(i)
        return RequestResult(gen.completion_tokens, time.perf_counter() - t0, cut=False,
                             retractions=int(gen.meta.get("num_retractions", 0) or 0))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, range(n)))


def _level(ctx: ProbeContext, level: int, prompts: Sequence[Sequence[int]]) -> dict[str, Any]:
    clients = [SGLangClient(ctx.client.base_url, timeout_s=ctx.client.timeout_s) for _ in range(level)]
    window_s = ctx.param("window_s")
    output_len = ctx.workload.output_len

    def streamer(i: int, rid: str) -> Generator[Generation, None, None]:
        return clients[i % level].generate_stream(prompts[i % len(prompts)], max_new_tokens=output_len, rid=rid)

    def send(i: int) -> Generation:
        return clients[i % level].generate(prompts[i % len(prompts)], max_new_tokens=output_len)[0]

    n = level * ctx.param("requests_per_client")
    ctx.client.flush_cache()
    mark = ctx.server.log_size()
    started = time.time()  # when, so a report can show how the two sides' rounds interleaved
    t0 = time.perf_counter()
    window = MeasurementWindow(ctx.client.abort, window_s) if window_s is not None else None
    answered = run_window(window, streamer, n, level) if window else run_to_the_end(send, n, level)
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
        **level_rates(answered, wall, window_s, window.allowed_s if window else None),
        "retractions": answered_retractions,
        "retraction_events": [dataclasses.asdict(r) for r in events],
        "swa_peak_usage": max(curve.usage) if curve else None,
        "swa_peak_tokens": max(curve.held) if curve else None,
    }


def level_rates(answered: list[RequestResult], wall: float, window_s: float | None,
                abort_allowed_s: float | None = None) -> dict[str, Any]:
    """A level's tokens and rates. With a window: the tokens streamed before its end over the
    window (or the level's wall time, if every request ended sooner), vacuous when there are none;
    a request that ended later than `abort_allowed_s` after its abort was answered is a finding."""
    not_positive = [r for r in answered if r.seconds <= 0]
    if not_positive:
        # A request starts inside the window by construction: a duration that is not positive
        # is a broken measurement, never a sample (its tok/s would be negative or infinite).
        raise ServerFinding(f"{len(not_positive)} of {len(answered)} requests measured a duration that is not "
                            f"positive (shortest {min(r.seconds for r in not_positive):.3g} s): not a sample",
                            tuple(dataclasses.asdict(r) for r in not_positive))
    tokens = sum(r.completion_tokens for r in answered)
    rates: dict[str, Any] = {
        "completion_tokens": tokens,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "request_tok_s": [r.tok_s for r in answered],
    }
    if window_s is None:
        return rates
    _check_aborts(answered, window_s, abort_allowed_s)
    if tokens == 0:
        raise VacuousResult(f"no request produced a token within the {window_s:g} s window "
                            f"({len(answered)} sent)")
    measured_s = min(wall, window_s)
    answers = [r.abort_answer_s for r in answered if r.abort_answer_s is not None]
    return {**rates, "tok_s": tokens / measured_s, "window_s": window_s, "measured_s": measured_s,
            "requests_sent": len(answered), "request_cut": [r.cut for r in answered],
            "requests_cut": sum(r.cut for r in answered),
            "abort_answer_s": max(answers) if answers else None}


def _check_aborts(answered: list[RequestResult], window_s: float, allowed_s: float | None) -> None:
    """A cut request still streaming when the harness gave up, or ended later than allowed after
    its abort was answered, is a finding for the cell, whatever it carried: the server does not honour
    /abort_request (in time). Its tokens after the window were not counted either way."""
    cut = [r for r in answered if r.cut]
    given_up = [r for r in cut if r.given_up]
    if given_up:
        raise ServerFinding(
            f"the server did not honour /abort_request: {len(given_up)} of {len(cut)} requests cut by the "
            f"{window_s:g} s window were still generating when the harness gave up on their aborts "
            f"({sum(r.tokens_after_window for r in given_up)} tokens after the window, not counted)",
            tuple(dataclasses.asdict(r) for r in given_up))
    late = [r for r in cut if allowed_s is not None and r.abort_answer_s is not None and r.abort_answer_s > allowed_s]
    if late:
        # Every late request has its answer time (`late` says so): the filter narrows the type.
        answer = [r.abort_answer_s for r in late if r.abort_answer_s is not None]
        raise ServerFinding(
            f"the server honoured /abort_request late: {len(late)} of {len(cut)} requests cut by the "
            f"{window_s:g} s window ended {min(answer):.2f}-{max(answer):.2f} s after their abort was answered "
            f"(allowed {allowed_s:.2f} s, about one decode step), carrying "
            f"{sum(r.tokens_after_window for r in late)} tokens made after the window (not counted)",
            tuple(dataclasses.asdict(r) for r in late))


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

# --------------------------------------------------------------------------- reproducer


def _measurement_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer:
    """A throughput level: no single request shows it (its clients share the server's batches
    over every round), so its reproducer is the measurement itself: the configuration's
    throughput probe alone, at the level that decided where every deciding metric is of that
    level (else at the suite's levels), as `command` (report.md puts the run's own options before
    it), and the workload it measured."""
    assert comp.decided_by is not None, "reproduce.py asks for the measurement of a decided comparison only"
    levels = [int(c) for c in cand.facts.get("concurrency") or ()]
    level = next((c for c in levels if comp.decided_by in (metric_name(c), request_metric_name(c))), None)
    c = comp.metrics[comp.decided_by]
    one = level is not None and len(levels) > 1 and all(
        n in (metric_name(level), request_metric_name(level)) for n in comp.deciding)
    command = ("--config", comp.config, "--probe", comp.probe,
               *(("--set", f"{comp.probe}.concurrency=[{level}]") if one else ()))
    spec = cand.metadata.get("workload") or {}
    workload = (f"{spec.get('prompts', '?')} prompts of {'–'.join(str(n) for n in spec.get('prompt_len') or ())} "
                f"tokens, {spec.get('output_len', '?')} generated each, {cand.facts.get('repeats', '?')} rounds "
                f"{'at' if one else 'over'} concurrency {level if one else levels}")
    where = f"level {level} ({comp.decided_by})" if level is not None else comp.decided_by
    return Reproducer(
        prompts=(), first_divergent={"metric": comp.decided_by, **({"concurrency": level} if level else {})},
        requests=(), command=command,
        expect=(f"{where}: base median {c.base.median:.6g}, candidate {c.candidate.median:.6g} over "
                f"{c.base.n} paired rounds, as the run measured it ({c.note}); a run of the command measures it "
                f"again on both sides, interleaved as this one was"),
        shrink=(f"Not shrunk to a request: a throughput level is a property of a whole measurement (its clients "
                f"share the server's batches over every round); the configuration's {comp.probe} probe alone, "
                f"{'at the level that decided' if one else 'at the suite levels (the verdict reads several)'}: "
                f"{workload}"))


REPRODUCTION = Reproduction(measurement=_measurement_reproducer)

PROBE = register(ProbeKind("throughput", run, "tok/s at fixed lengths and several concurrencies (noisy)",
                           params=PARAMS, describe=describe, merge=merge, planned=planned,
                           values=lambda metric: ROUND, figures=FIGURES, reproduction=REPRODUCTION))
