"""Parameters several probes take, declared once: the workload overrides, the batch size, the
KL tail and gate, the prefix-cache hit floor, and how noisy metrics are judged."""

from __future__ import annotations

from typing import Any

from harness.params import Param, ParamRole
from harness.suite import WORKLOAD_PARAMS

MEASURED, JUDGED = ParamRole.MEASURED, ParamRole.JUDGED


def non_empty(value: list[Any]) -> str | None:
    return None if value else "must list at least one value"


# Judging parameters are bounded, so that no value makes a verdict unreachable or a figure
# infinite: a floor that relative to the base is at most half of it (a slowdown can never
# exceed 100% of a throughput: a floor of 1 or more reads every slowdown *same*); an absolute one
# finite; alpha at most 0.5 (beyond it a "significant" result is likelier false than not).
FLOOR_ABS_RANGE = (0.0, 1e6)
FLOOR_REL_RANGE = (0.0, 0.5)
ALPHA_RANGE = (1e-6, 0.5)


def _floor_table(value: dict[str, dict[str, float]]) -> str | None:
    for metric, floor in value.items():
        unknown = set(floor) - {"absolute", "relative"}
        if unknown:
            return f"{metric}: unknown key(s) {', '.join(sorted(unknown))} (absolute, relative)"
        for key, (low, high) in (("absolute", FLOOR_ABS_RANGE), ("relative", FLOOR_REL_RANGE)):
            if key in floor and not low <= floor[key] <= high:
                return f"{metric}.{key}: {floor[key]!r} is out of range [{low:g}, {high:g}]"
    return None


# A [probe.<name>] table may override any [workload] key for that probe alone.
WORKLOAD = WORKLOAD_PARAMS

BATCH_SIZE = Param("batch_size", int, None, "prompts per /generate request (default: all at once)",
                   MEASURED, low=1, high=100_000)

# tau is MEASURED: the share of tokens over it and the first divergent position are summarised
# into the cell's facts and samples when the cell is measured.
KL = (
    Param("tau", float, 1e-6, "a per-token KL term above this counts as diverged", MEASURED, low=0.0, high=1e3),
    Param("threshold", float, None, "gate on the mean k3 of each side (strict <)", JUDGED, low=0.0, high=1e3),
)

# MEASURED: below it the probe stops before its cold replay, so the cell's samples depend on it.
MIN_HIT_FRACTION = Param("min_hit_fraction", float, 0.5,
                         "fewer real prefix-cache hits than this share of prompts is vacuous",
                         MEASURED, low=0.0, high=1.0)

# How compare.py judges: floors for noisy metrics, the test's alpha, which metrics decide.
JUDGING = (
    Param("floors", dict[str, dict[str, float]], {},
          "per metric: {absolute, relative} practical floor of a noisy comparison", JUDGED,
          check=_floor_table),
    Param("floor_abs", float, 0.0, "absolute floor of every noisy metric without its own `floors` entry",
          JUDGED, low=FLOOR_ABS_RANGE[0], high=FLOOR_ABS_RANGE[1]),
    Param("floor_rel", float, 0.0, "floor of every noisy metric without its own `floors` entry, "
          "relative to the base median", JUDGED, low=FLOOR_REL_RANGE[0], high=FLOOR_REL_RANGE[1]),
    Param("alpha", float, 0.05, "significance level of the rank tests (Wilcoxon, Mann-Whitney), over all "
          "of a comparison's looks", JUDGED, low=ALPHA_RANGE[0], high=ALPHA_RANGE[1]),
    Param("bootstrap_seed", int, 0, "seed of the bootstrap confidence intervals", JUDGED, low=0),
    Param("verdict_metrics", list[str], None, "metrics that decide the verdict (default: the primary and every exact "
          "metric; exact ones left out still show when they change)",
          JUDGED, check=non_empty),
    # MEASURED: they decide how many samples are measured (harness/sequential.py); max_looks also
    # sets each look's share of alpha.
    Param("max_looks", int, 3, "looks at a noisy comparison: an unknown is measured again (more rounds, or "
          "twice the prompts) until it decides or this many looks are spent; each look spends a share of alpha",
          MEASURED, low=1, high=8),
    Param("look_budget_s", float, 900.0, "seconds the further looks of one comparison may take at most",
          MEASURED, low=0.0, high=86_400.0),
)

# How the pipeline runs an interleaved probe's rounds. MEASURED: it changes what each side's
# round ran beside (the other side, or nothing).
SIDES_AT_ONCE = Param(
    "sides_at_once", bool, False,
    "run each round on both sides at the same time instead of one after the other (A B B A): "
    "on a card other jobs share, whatever else loads it falls on both sides alike, at the cost "
    "of the two sides sharing it too", MEASURED)
# MEASURED: it decides which side's requests reach the card first in each round.
PLACEMENT_SEED = Param(
    "placement_seed", int, 0, "with sides_at_once: seed of the order in which the sides start each "
    "round (each side first in half the rounds, shuffled)", MEASURED, low=0)
