"""swa_peak: how many tokens a long generation holds in the sliding-window (SWA) KV pool.

Each prompt generates `output_len` tokens (past the window) alone on a flushed server, logged
at `--decode-log-interval 1`; the `#swa token` field of every Decode line is the curve. A healthy
server evicts out-of-window tokens every SGLANG_SWA_EVICTION_INTERVAL steps, so the curve is a
sawtooth under a plateau near the window; a path that skips eviction holds every generated
token (slope 1). The peak is over Decode lines: a Prefill line gives only a usage fraction, and
just after a prefill the pool holds the whole prompt until the first eviction. While the request
runs, the `sglang:swa_used_tokens` gauge is polled as a cross-check: gauges are set when a log
line is written, so no scrape may exceed the larger of the logged peak and the prompt, and the
scrapes alone would miss the peak. No logprobs are asked for: DFLASH and DSPARK reject them.
"""

from __future__ import annotations

import statistics
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from harness.client import SGLangClient, generate_body
from harness.errors import ProbeNotApplicable, ServerError
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, Reproduction, ValueIndex, descriptive,
                                 given, metric, register, summary)
from harness.probes.common import SwaCurve, swa_curve
from harness.probes.shared_params import JUDGING, MEASURED, WORKLOAD
from harness.reproducer import FLUSH, Form, Observed, with_form, workload_prompts
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request, Role
from harness.sparkline import sparkline
from harness.verdict_stats import Kind
from harness.textfmt import fmt, fmt_distinct, fmt_pair, md_table, plural

GAUGE = "sglang:swa_used_tokens"


def growth_slope(curve: SwaCurve) -> float | None:
    """Slope of held vs generated tokens over the second half of the curve: about 1 when
    nothing is evicted, about 0 when the pool is bounded. Theil-Sen (median of pairwise
    slopes), so the last line, logged after the finished request released its slots, does
    not bend it."""
    half = len(curve.held) // 2
    x, y = curve.generated[half:], curve.held[half:]
    if len(set(x)) < 2:
        return None
    from scipy.stats import theilslopes  # imported on use: scipy costs seconds per CLI start

    return float(theilslopes(y, x)[0])


def plateau(curve: SwaCurve) -> float:
    """Median held tokens over the second half of the curve."""
    return float(statistics.median(curve.held[len(curve.held) // 2:]))


@contextmanager
def gauge_poll(client: SGLangClient, every_s: float) -> Iterator[list[float]]:
    """Scrape the SWA gauge every `every_s` seconds while the block runs (on its own connection);
    yields the list the values land in (empty when the server runs without --enable-metrics)."""
    seen: list[float] = []
    stop = threading.Event()
    scraper = SGLangClient(client.base_url, timeout_s=10)

    def poll() -> None:
        while not stop.is_set():
            try:
                value = scraper.metrics().get(GAUGE)
            except ServerError:
                return
            if value is None:
                return
            seen.append(value)
            stop.wait(every_s)

    thread = threading.Thread(target=poll, name="swa-gauge", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def run(ctx: ProbeContext) -> ProbeOutput:
    prompts = list(ctx.workload.prompts)
    samples: list[dict[str, Any]] = []
    for i, prompt in enumerate(prompts):
        ctx.client.flush_cache()
        mark = ctx.server.log_size()
        with gauge_poll(ctx.client, ctx.param("gauge_poll_s")) as gauge:
            gen = ctx.client.generate(prompt, max_new_tokens=ctx.workload.output_len)[0]
        curve = swa_curve(ctx.server.log_since(mark))
        if not curve:
            raise ProbeNotApplicable("no `#swa token` in the Decode log lines: this server has no "
                                     "sliding-window pool (or does not log at interval 1)")
        samples.append({
            "prompt_len": len(prompt),
            "completion_tokens": gen.completion_tokens,
            "finish_reason": (gen.meta.get("finish_reason") or {}).get("type"),
            "retractions": int(gen.meta.get("num_retractions", 0) or 0),
            "peak": max(curve.held),
            "plateau": plateau(curve),
            "slope": growth_slope(curve),
            "peak_usage": max(curve.usage),
            "gauge_scrapes": len(gauge),
            "gauge_max": int(max(gauge)) if gauge else None,
            "generated": list(curve.generated),
            "swa_tokens": list(curve.held),
        })
        ctx.advance(i + 1, len(prompts))
    return ProbeOutput(samples=tuple(samples), metrics=_metrics(samples), facts=_facts(samples))


# Every metric holds one value per request (each prompt generated alone on a flushed server).
REQUEST = ValueIndex("request", lambda samples, i: f"request {i}")


def _metrics(samples: list[dict[str, Any]]) -> tuple[Metric, ...]:
    return (
        Metric("swa_peak", Kind.EXACT, tuple(float(s["peak"]) for s in samples), unit="tokens",
               better="lower", headline="max"),
        Metric("swa_plateau", Kind.EXACT, tuple(s["plateau"] for s in samples), unit="tokens",
               better="lower", headline="max"),
        Metric("retractions", Kind.EXACT, tuple(float(s["retractions"]) for s in samples),
               better="lower", headline="sum"),
    )


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Three exact metrics, on any configuration (pool peaks of a fixed workload)."""
    return tuple(PlannedMetric(name, Kind.EXACT) for name in ("swa_peak", "swa_plateau", "retractions"))


def _facts(samples: list[dict[str, Any]]) -> dict[str, Any]:
    peak = max(s["peak"] for s in samples)
    slopes = [s["slope"] for s in samples if s["slope"] is not None]
    scraped = [s for s in samples if s["gauge_max"] is not None]
    return {
        "swa_peak": peak,
        "swa_plateau": max(s["plateau"] for s in samples),
        "growth_slope": max(slopes) if slopes else None,
        "retractions": sum(s["retractions"] for s in samples),
        "swa_peak_usage": max(s["peak_usage"] for s in samples),
        "generated_tokens": sum(s["completion_tokens"] for s in samples),
        "requests": len(samples),
        "aborted": sum(s["finish_reason"] == "abort" for s in samples),
        "decode_lines": sum(len(s["swa_tokens"]) for s in samples),
        # None when the server runs without --enable-metrics.
        "gauge_max": max(s["gauge_max"] for s in scraped) if scraped else None,
        "gauge_within_log": (all(s["gauge_max"] <= max(s["peak"], s["prompt_len"]) for s in scraped)
                             if scraped else None),
    }


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    text = f"peak {fmt(facts.get('swa_peak'))} (plateau {fmt(facts.get('swa_plateau'))}"
    if facts.get("growth_slope") is not None:
        text += f", slope {round(facts['growth_slope'], 2) + 0.0:.2f}"  # + 0.0: no "-0.00"
    text += f") over {fmt(facts.get('generated_tokens'))} tok"
    retractions = facts.get("retractions") or 0
    if retractions:
        text += f", {retractions} retraction{'s' if retractions != 1 else ''}"
    if facts.get("aborted"):
        text += f", {facts['aborted']} aborted"
    return text


def identical_curves(cells: dict[Role, CellResult]) -> bool:
    """Both sides drew the same curves, request for request."""
    curves = [[(s["generated"], s["swa_tokens"]) for s in cell.samples] for cell in cells.values()]
    return len(curves) == 2 and curves[0] == curves[1]


def plot(config: str, cells: dict[Role, CellResult], out_dir: Path) -> str:
    """SWA tokens held vs generated tokens, one line per request, base and candidate."""
    from harness.report import plot as draw  # matplotlib: only when a report draws

    name = f"{config}-swa_peak"
    identical = identical_curves(cells)
    with draw.figure(out_dir, name) as ax:
        for role, cell in cells.items():
            # Drawn over the base's, an identical candidate line would hide it: dashed, and said.
            dashed = identical and role == Role.CANDIDATE
            for i, sample in enumerate(cell.samples):
                label = (f"{role.value} {draw.rev_name(cell)}: peak {cell.facts.get('swa_peak')}"
                         f"{' (identical to the base: dashed)' if dashed else ''}" if i == 0 else None)
                ax.plot(sample["generated"], sample["swa_tokens"], color=draw.COLORS[role], lw=1.2,
                        alpha=0.9 if i == 0 else 0.5, label=label, linestyle="--" if dashed else "-")
        ax.set_xlabel("generated tokens")
        ax.set_ylabel("SWA pool tokens held (#swa token)")
        ax.set_title(f"{config}: SWA tokens vs generated tokens")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    return draw.png_path(name)


# The text figure: characters per curve, and the requests per side drawn (a suite may ask for
# many prompts; the first few show the shape, the plot and the samples hold every one).
SPARK_WIDTH = 40
SPARK_REQUESTS = 4


def text_figure(cells: dict[Role, CellResult]) -> list[str]:
    """The curves of `plot` as sparklines on one scale (one column is the largest count held
    over its share of the generated tokens), with each request's peak: the shape survives a
    report pasted without its image."""
    curves = [(role, i, sample) for role, cell in cells.items()
              for i, sample in enumerate(cell.samples[:SPARK_REQUESTS])]
    x_max = max((max(s["generated"], default=0) for _, _, s in curves), default=0)
    y_max = max((max(s["swa_tokens"], default=0) for _, _, s in curves), default=0)
    width = max(1, min(SPARK_WIDTH, int(x_max)))  # never a column narrower than one token
    several = any(len(cell.samples) > 1 for cell in cells.values())
    body = []
    for role, i, sample in curves:
        line = sparkline(sample["generated"], sample["swa_tokens"], x_max=x_max, y_max=y_max, width=width)
        side = f"{role.value}, request {i + 1}" if several else role.value
        body.append((side, f"`{line}`" if line else "–", fmt(max(sample["swa_tokens"], default=None))))
    shown = "".join(f"; {role.value}: first {SPARK_REQUESTS} of {len(cell.samples)} requests"
                    for role, cell in cells.items() if len(cell.samples) > SPARK_REQUESTS)
    return [f"SWA tokens held (`#swa token`) over 0–{fmt(x_max)} generated tokens, {width} characters "
            f"(each the largest count in its stretch), ▁ 0 … █ {fmt(y_max)}{shown}:", "",
            *md_table(("side", "SWA tokens held", "peak"), body)]


# --------------------------------------------------------------------------- reproducer


# What each metric reads of one request's answer and the Decode lines its server logged meanwhile.
READS: dict[str, Callable[[Any, SwaCurve], float]] = {
    "swa_peak": lambda gen, curve: float(max(curve.held)),
    "swa_plateau": lambda gen, curve: plateau(curve),
    "retractions": lambda gen, curve: float(gen.meta.get("num_retractions", 0) or 0),
}


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """The first request whose deciding figure (the pool's peak, its plateau, the retractions)
    differs: its prompt generated alone from a flushed cache, as the probe sent it, read from
    the `#swa token` of the Decode lines each side's server logged meanwhile."""
    decided, prompts = comp.metrics.get(comp.decided_by or ""), workload_prompts(cand)
    read = READS.get(comp.decided_by or "")
    i = None if decided is None else decided.first_difference
    if read is None or i is None or prompts is None or i >= min(len(prompts), len(base.samples), len(cand.samples)):
        return None
    new = int(cand.samples[i]["completion_tokens"])
    requests = (FLUSH, Request(f"generate {new} tokens from prompt {i}, alone", "/generate",
                               generate_body(prompts[i], max_new_tokens=new)))
    what = comp.decided_by or ""

    def answered(_size: int, seen: tuple[list, str]) -> Observed:
        gens, log = seen
        curve = swa_curve(log)
        gen = gens[-1]
        if gen is None or not curve:
            return Observed(None)
        return Observed(read(gen, curve), (max(curve.held), plateau(curve), len(curve.held)))

    def words(b: Observed, c: Observed) -> str:
        sides = (("base", b), ("candidate", c))
        shown = iter(fmt_distinct([float(v) for _, x in sides if x.points for v in x.points[:2]]))
        parts = []
        for side, x in sides:
            if not x.points:
                parts.append(f"the {side}'s server logged no `#swa token` in its Decode lines")
                continue
            peak, flat = next(shown), next(shown)
            extra = f", {fmt(x.value)} retractions" if what == "retractions" else ""
            parts.append(f"the {side}'s server logged {x.points[2]} Decode lines: peak {peak} SWA tokens held, "
                         f"plateau {flat}{extra}")
        return "; ".join(parts)

    stored = fmt_pair(float(base.samples[i][SAMPLE_KEYS[what]]), float(cand.samples[i][SAMPLE_KEYS[what]]))
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"index": i, "metric": what},
        requests=requests,
        expect=(f"{what} of request {i}: base {stored[0]}, candidate {stored[1]} (read each server's log: the "
                f"`#swa token` of its Decode lines while the request runs; on a server that ran other batches "
                f"first the eviction cadence, and so the counts, differ)"),
        shrink=f"From the stored samples: {plural(len(cand.samples), 'request')} → request {i}, as measured (its "
               f"length is what fills the pool)"),
        Form(lambda _size: requests, answered, words, 1, 1, reads_log=True, fresh_servers=True))


# Where a sample keeps each metric's value.
SAMPLE_KEYS = {"swa_peak": "peak", "swa_plateau": "plateau", "retractions": "retractions"}


PARAMS = (
    *WORKLOAD,
    Param("gauge_poll_s", float, 0.1, "seconds between scrapes of the SWA gauge", MEASURED,
          low=0.001, high=60.0),
    *JUDGING,
)
FIGURES = (
    metric("swa_peak"), metric("swa_plateau"), metric("retractions"),
    *summary("swa_peak", "swa_peak", "swa_peak_usage", "gauge_max", "gauge_within_log"),
    *summary("swa_plateau", "swa_plateau", "growth_slope"),
    *summary("retractions", "retractions"),
    *given("the workload's size", "requests"),
    *descriptive("fixed by the requests and output_len (ignore_eos); what they held is compared by the peak and "
                 "plateau", "generated_tokens", "aborted", "decode_lines"),
)

PROBE = register(ProbeKind("swa_peak", run, "SWA pool tokens held over a long generation (peak, plateau)",
                           params=PARAMS, server_args=("--decode-log-interval", "1", "--enable-metrics"),
                           describe=describe, plot=plot, text_figure=text_figure,
                           values=lambda metric: REQUEST, planned=planned, figures=FIGURES,
                           reproduction=Reproduction(exact=_exact_reproducer)))
