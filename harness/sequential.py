"""Sequential decisions for noisy metrics: an *unknown* is measured again until it decides.

As Chromium's Pinpoint does, a comparison whose noisy metrics read *unknown* is not the end: the
pipeline measures both sides again (more rounds of an interleaved probe, on the servers still
up, sides placed as before; or the probe again over a workload with twice the prompts) and
looks once more, until the comparison reads *same* or *different* or `max_looks` looks (or
`look_budget_s` seconds of extra looks) are spent.

Looking more than once must not raise the false-*different* rate: each look spends a share of
the suite's alpha, fixed before the first look by `max_looks` alone (never by whether later
looks happen), and the shares sum to alpha, so by the union bound the chance that *any* look
reads a false *different* is at most alpha whatever the looks' correlation. The first look gets
FIRST_SHARE of alpha (it is the suite's planned design and usually decides), each later one an
equal share of the rest. The same share sets the confidence of the look's intervals, so a
*same* (an interval inside the floor) is held to it too.

A cell records where its samples stand (`sequential` in its facts: this look, the most looks,
and every earlier look's verdict): compare.py judges the last look at that look's share, from
the stored samples, so a stored run is judged again exactly as the pipeline judged it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# How a later look grows the samples of a probe that is not measured in rounds: its workload's
# prompts, times this per look (look j measures WORKLOAD_GROWTH ** (j - 1) times the prompts).
WORKLOAD_GROWTH = 2

# The first look's share of alpha. 0.7 of 0.05 (0.035) keeps throughput's default six rounds able
# to decide at the first look, as they could before looks existed (all six one way: Wilcoxon p
# 0.031); half of alpha (0.025) would not, and every such suite would need a second look.
FIRST_SHARE = 0.7


def look_alpha(alpha: float, look: int, max_looks: int) -> float:
    """The share of `alpha` that look `look` (1-based) of at most `max_looks` spends."""
    if not 1 <= look <= max_looks:
        raise ValueError(f"look {look} is not one of 1..{max_looks}")
    if max_looks == 1:
        return alpha
    return alpha * FIRST_SHARE if look == 1 else alpha * (1 - FIRST_SHARE) / (max_looks - 1)


@dataclass(frozen=True)
class Look:
    """One look at a comparison: how many samples per side it had and what it read."""

    look: int
    samples: int  # of the first deciding noisy metric, per side
    verdict: str
    alpha: float

    def to_dict(self) -> dict[str, Any]:
        return {"look": self.look, "samples": self.samples, "verdict": self.verdict, "alpha": self.alpha}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Look:
        return cls(int(d["look"]), int(d["samples"]), str(d["verdict"]), float(d["alpha"]))


@dataclass(frozen=True)
class LookState:
    """Where a cell's samples stand among the looks: the `sequential` fact of both sides' cells."""

    look: int
    max_looks: int
    earlier: tuple[Look, ...] = ()  # every look before this one, in order
    scale: int = 1  # the workload's prompts at this look, over the planned ones (1 for rounds)
    stopped: str = ""  # why no further look followed although this one read unknown

    def to_dict(self) -> dict[str, Any]:
        return {"look": self.look, "max_looks": self.max_looks, "earlier": [l.to_dict() for l in self.earlier],
                "scale": self.scale, **({"stopped": self.stopped} if self.stopped else {})}

    @classmethod
    def from_facts(cls, facts: dict[str, Any]) -> LookState | None:
        d = facts.get("sequential")
        if not isinstance(d, dict):
            return None
        return cls(int(d["look"]), int(d["max_looks"]), tuple(Look.from_dict(l) for l in d.get("earlier", ())),
                   int(d.get("scale", 1)), str(d.get("stopped", "")))

    def alpha(self, alpha: float) -> float:
        return look_alpha(alpha, self.look, self.max_looks)

    @property
    def last(self) -> bool:
        return self.look == self.max_looks or bool(self.stopped)


@dataclass
class LookBudget:
    """What is left for a comparison's further looks: looks and seconds."""

    max_looks: int
    seconds: float
    spent_s: float = 0.0
    history: list[Look] = field(default_factory=list)

    def why_not(self, look: int) -> str:
        """Why look `look` may not be taken ("" where it may)."""
        if look > self.max_looks:
            return f"max_looks {self.max_looks} spent"
        if self.spent_s >= self.seconds:
            return f"look_budget_s {self.seconds:g} spent ({self.spent_s:.0f} s of further looks)"
        return ""
