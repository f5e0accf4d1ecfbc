"""Which reproducer a *different* comparison gets: its probe's (`ProbeKind.reproduction`: the
measurement again, an exact verdict's smallest requests, a noisy verdict's largest effect), a
finding's decode, else the located difference in words. The pieces they are built of:
harness/reproducer.py.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from harness.probes import PROBES
from harness.probes.base import Reproduction
from harness.reproducer import FLUSH, decode_request, finite_form, with_form, workload_prompts
from harness.results import CellResult, Metric, ProbeComparison, Reproducer, Request, Status
from harness.textfmt import fmt_pair
from harness.verdict_stats import Comparison, Kind, Verdict

Pairs = Sequence[tuple[Metric, Metric | None]]


def reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult, pairs: Pairs) -> Reproducer | None:
    """The reproducer of a *different* comparison (None for any other verdict)."""
    if comp.verdict != Verdict.DIFFERENT:
        return None
    decided = comp.metrics.get(comp.decided_by or "")
    kind = PROBES.get(comp.probe)
    how = kind.reproduction if kind is not None else None
    if how is not None and how.measurement is not None and decided is not None:
        return how.measurement(comp, base, cand)
    if how is not None and how.exact is not None and decided is not None and base.samples and cand.samples:
        if decided.kind == Kind.NOISY:
            return _largest_effect(comp, decided, base, cand, pairs, how)
        built = how.exact(comp, base, cand)
        if built is not None:
            return built
    if decided is None:
        found = _finding(base, cand)
        if found is not None:
            return found
    return _located(comp, decided, base, pairs)


# The findings a decode shows (kl's, revision_kl's): a decode of one prompt is their request.
DECODE_FINDINGS = ("decode returned ", "greedy decode returned ")


def _finding(base: CellResult, cand: CellResult) -> Reproducer | None:
    """A finding on one side that a decode shows (a null, NaN or inf output logprob, named by
    prompt and position in the finding's samples): one flush and one decode of that prompt, up
    to the first bad position, against the other side's finite answer there."""
    side, cell = next(((r, c) for r, c in (("candidate", cand), ("base", base)) if c.status == Status.FINDING),
                      (None, None))
    if cell is None or not cell.reason.startswith(DECODE_FINDINGS) or "output logprobs" not in cell.reason:
        return None
    row = next((r for r in cell.samples if isinstance(r, dict) and "prompt" in r), None)
    prompts, spec = workload_prompts(cell), cell.metadata.get("workload") or {}
    if row is None or prompts is None or row["prompt"] >= len(prompts):
        return None
    bad = [*row.get("null_positions", ()), *(j for j, _ in row.get("non_finite_positions", ()))]
    if not bad:
        return None
    i, j, full = row["prompt"], min(bad), int(spec.get("output_len") or min(bad) + 1)

    def decode(size: int) -> tuple[Request, ...]:
        return (FLUSH, decode_request(f"greedy decode of prompt {i}, {size} tokens", prompts[i], size))
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "non-finite output logprob",
                                       "side": side},
        requests=decode(j + 1),
        expect=f"on the {side}, output_token_logprobs[{j}] is not a finite number ({cell.reason})",
        shrink=(f"From the finding: prompt {i}, max_new_tokens {full} → {j + 1} (its first bad position, "
                f"{j})")), finite_form(decode, j + 1, max(full, j + 1)))


def _located(comp: ProbeComparison, decided, base: CellResult, pairs: Pairs) -> Reproducer:
    """No request form for this probe (or its samples): where the deciding metric differs, and
    each differing exact metric's first differing value in words."""
    where = None if decided is None else decided.first_difference
    return Reproducer(
        prompts=(), first_divergent=None if where is None else {"index": where, "metric": comp.decided_by},
        requests=(), expect="; ".join(_exact_differences(comp, base, pairs)) or comp.note,
        shrink="Not shrunk: this probe's difference is a property of the whole run "
               "(rerun the configuration with the cells' server argv)")


def _exact_differences(comp: ProbeComparison, base: CellResult, pairs: Pairs) -> list[str]:
    """"swa_peak at request 0: base 117, candidate 659" for each exact metric that differs at
    a value both sides have (placed as its probe declares, `ProbeKind.values`)."""
    kind = PROBES.get(comp.probe)
    out = []
    for b, c in pairs:
        found = comp.metrics.get(b.name)
        i = None if found is None or found.kind != Kind.EXACT else found.first_difference
        if c is None or i is None or i >= min(len(b.values), len(c.values)):
            continue
        declared = kind.values(b.name) if kind is not None and kind.values is not None else None
        place = declared.place(base.samples, i) if declared is not None else f"value {i}"
        shown = fmt_pair(b.values[i], c.values[i])
        out.append(f"{b.name} at {place}: base {shown[0]}, candidate {shown[1]}")
    return out


def _largest_effect(comp: ProbeComparison, decided: Comparison, base: CellResult, cand: CellResult, pairs: Pairs,
                    how: Reproduction) -> Reproducer:
    """A noisy verdict: the prompt whose paired difference is largest in the effect's direction,
    with the requests its probe builds for it (`paired_effect`); unpaired (a cache probe's k3 over
    each side's own hits), the sample its probe picks on the side the effect points to
    (`unpaired_effect`)."""
    b, c = next((m, o) for m, o in pairs if m.name == comp.decided_by)
    sign = 1.0 if decided.effect >= 0 else -1.0
    if how.unpaired_effect is not None and c is not None:
        return how.unpaired_effect(comp, base, cand, (b, c), sign) or _located(comp, decided, base, pairs)
    if not (b.paired and c is not None and len(b.values) == len(c.values)):
        return _located(comp, decided, base, pairs)
    i = max(range(len(b.values)), key=lambda k: sign * (c.values[k] - b.values[k]))
    requests, form = how.paired_effect(comp, cand, i, sign) if how.paired_effect is not None else ((), None)
    return dataclasses.replace(Reproducer(
        prompts=(i,), first_divergent=None, requests=requests,
        expect=(f"{comp.decided_by} of prompt {i}: base {b.values[i]:.6g}, candidate {c.values[i]:.6g} "
                f"(the largest paired difference; the verdict is over all {len(b.values)})"),
        shrink="Not shrunk (a noisy verdict): the prompt with the largest paired effect"), form=form)
