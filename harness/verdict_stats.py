"""Statistics behind every verdict: the exact / noisy comparisons of a base and a candidate
sample (the per-sample maths they compare, k3 and KL, is harness/divergence.py).

Two metric kinds, as benchstat's ``assume=exact`` versus its default:

* ``exact`` metrics (deterministic logprobs, fixed-workload pool peaks) are equal or not,
  with no tolerance and no statistics; one differing value is the finding.
* ``noisy`` metrics (throughput, accept length, k3 on a non-deterministic build) get a median
  with a bootstrap CI per side and a practical floor (asv's factor, pyperf's ``--min-speed``).
  Paired designs (the same prompts on both sides) are judged on the per-prompt differences: a
  Wilcoxon signed-rank test and a paired bootstrap CI of the median difference; unpaired ones
  by a Mann-Whitney U test and a CI of the difference of medians. The verdict is Pinpoint's
  three-way one: *same* when the samples are equal or the effect's CI lies inside the floor,
  *different* when the change is both significant and beyond the floor, *unknown* when more
  samples would decide, with a normal-approximation estimate of how many.

Floors and thresholds are arguments, never constants here: they come from the suite or a
baselines file. Every function is pure and deterministic for a given ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import Any

import numpy as np

from harness.divergence import same_value

__all__ = [
    "Bootstrap",
    "Comparison",
    "Floor",
    "Kind",
    "Summary",
    "Verdict",
    "combine_verdicts",
    "compare_exact",
    "compare_noisy",
    "compare_paired",
    "least_samples",
    "min_mann_whitney_p",
    "min_wilcoxon_p",
    "resolving_distance",
    "samples_needed",
    "summarize",
]


class Kind(str, Enum):
    EXACT = "exact"
    NOISY = "noisy"


class Verdict(StrEnum):
    """Base vs candidate for one (configuration, probe). The statistics decide the first three;
    n/a and error say that a side has no measurement to compare."""

    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "n/a"
    ERROR = "error"
    # A whole run's verdict only: no (configuration, probe) was measured on both sides.
    NOTHING_MEASURED = "nothing measured"


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Floor:
    """Practical floor below which a change does not matter, from the suite or baselines."""

    absolute: float = 0.0  # in the metric's unit
    relative: float = 0.0  # fraction of |base median|

    def __post_init__(self) -> None:
        if not (self.absolute >= 0.0 and self.relative >= 0.0):
            raise ValueError(f"floor must be non-negative: absolute={self.absolute}, relative={self.relative}")

    def threshold(self, base_center: float) -> float:
        return max(self.absolute, self.relative * abs(base_center))


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    ci_low: float
    ci_high: float
    mean: float
    min: float
    max: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "median": self.median,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "mean": self.mean,
            "min": self.min,
            "max": self.max,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        # null: a figure strict JSON cannot hold (a side with no finite value), read back as NaN
        return cls(n=int(d["n"]), **{k: _number(d[k]) for k in ("median", "ci_low", "ci_high", "mean", "min", "max")})


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _noisy_array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("need at least one sample")
    if not np.all(np.isfinite(x)):
        # A median or a difference of medians is meaningless with NaN or inf in the sample.
        raise ValueError("noisy samples must be finite")
    return x


def _check_boot(confidence: float, n_boot: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")


def _boot_medians(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    return np.median(x[idx], axis=1)


def _percentile_ci(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(boot, [100.0 * tail, 100.0 * (1.0 - tail)])
    return float(lo), float(hi)


def _summary(x: np.ndarray, ci: tuple[float, float]) -> Summary:
    return Summary(
        n=int(x.size),
        median=float(np.median(x)),
        ci_low=ci[0],
        ci_high=ci[1],
        mean=float(np.mean(x)),
        min=float(np.min(x)),
        max=float(np.max(x)),
    )


def summarize(
    values: Sequence[float] | np.ndarray, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> Summary:
    """Median with a percentile-bootstrap CI; the same ``seed`` gives the same CI."""
    _check_boot(confidence, n_boot)
    x = _noisy_array(values)
    if x.size == 1:
        v = float(x[0])
        return _summary(x, (v, v))
    boot = _boot_medians(x, n_boot, np.random.default_rng(seed))
    return _summary(x, _percentile_ci(boot, confidence))


def _exact_summary(values: Sequence[float]) -> Summary:
    # Exact metrics have no sampling error, so the CI collapses onto the median. NaN values
    # are left out of the statistics (they are compared, not averaged); a side with no
    # non-NaN value has NaN statistics.
    x = np.asarray(values, dtype=np.float64)
    finite = x[~np.isnan(x)]
    if finite.size == 0:
        nan = float("nan")
        return Summary(n=int(x.size), median=nan, ci_low=nan, ci_high=nan, mean=nan, min=nan, max=nan)
    s = _summary(finite, (0.0, 0.0))
    return Summary(
        n=int(x.size), median=s.median, ci_low=s.median, ci_high=s.median, mean=s.mean, min=s.min, max=s.max
    )


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Comparison:
    kind: Kind
    verdict: Verdict
    base: Summary
    candidate: Summary
    effect: float  # candidate median - base median
    ci: tuple[float, float] | None  # bootstrap CI of the effect; noisy only
    p: float | None  # Mann-Whitney U two-sided; noisy only
    floor: float  # the absolute threshold that was applied
    first_difference: int | None  # exact only: first index whose values differ
    note: str
    # Noisy only: judged on per-prompt differences (Wilcoxon, paired bootstrap), and for an
    # *unknown* verdict the samples per side that would resolve an effect of the floor's size.
    paired: bool = False
    needed: int | None = None
    # Paired only: the statistic of the per-pair differences judged, "median" or "mean" (a
    # metric whose headline is its mean, e.g. KL, whose change can sit in a few prompts).
    center: str = "median"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "verdict": self.verdict.value,
            "base": self.base.to_dict(),
            "candidate": self.candidate.to_dict(),
            "effect": self.effect,
            "ci": None if self.ci is None else [self.ci[0], self.ci[1]],
            "p": self.p,
            "floor": self.floor,
            "first_difference": self.first_difference,
            "note": self.note,
            # written only when set, so a file from before pairing round-trips unchanged
            **({"paired": True} if self.paired else {}),
            **({"needed": self.needed} if self.needed is not None else {}),
            **({"center": self.center} if self.center != "median" else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Comparison:
        ci = d.get("ci")
        p = d.get("p")
        first = d.get("first_difference")
        return cls(
            kind=Kind(d["kind"]),
            verdict=Verdict(d["verdict"]),
            base=Summary.from_dict(d["base"]),
            candidate=Summary.from_dict(d["candidate"]),
            effect=_number(d["effect"]),
            ci=None if ci is None else (float(ci[0]), float(ci[1])),
            p=None if p is None else float(p),
            floor=float(d["floor"]),
            first_difference=None if first is None else int(first),
            note=str(d["note"]),
            # absent from files written before pairing (schema 2): unpaired, no estimate
            paired=bool(d.get("paired", False)),
            needed=None if d.get("needed") is None else int(d["needed"]),
            center=str(d.get("center", "median")),  # absent: the median, as before it could be set
        )


def _exact_repr(v: float) -> str:
    # repr is the shortest string that round-trips, so two values that differ in the last
    # bit never print the same.
    return repr(float(v))


def compare_exact(base: Sequence[float], candidate: Sequence[float]) -> Comparison:
    """Bit-exact comparison: equal length and every value ``==`` (NaN equal to NaN).

    Never *unknown*: with no noise, one run per side decides.
    """
    b = [float(v) for v in base]
    c = [float(v) for v in candidate]
    first = next((i for i, (x, y) in enumerate(zip(b, c)) if not same_value(x, y)), None)
    bs, cs = _exact_summary(b), _exact_summary(c)

    if first is None and len(b) == len(c):
        verdict, note = Verdict.SAME, f"identical ({len(b)} value{'' if len(b) == 1 else 's'})"
    elif len(b) != len(c):
        verdict = Verdict.DIFFERENT
        if first is None:
            first = min(len(b), len(c))
            note = f"lengths differ: {len(b)} vs {len(c)} values, equal up to index {first}"
        else:
            note = (
                f"lengths differ: {len(b)} vs {len(c)} values; "
                f"differs at index {first}: {_exact_repr(b[first])} vs {_exact_repr(c[first])}"
            )
    else:
        assert first is not None
        verdict = Verdict.DIFFERENT
        note = f"differs at index {first}: {_exact_repr(b[first])} vs {_exact_repr(c[first])}"

    effect = cs.median - bs.median
    return Comparison(
        kind=Kind.EXACT,
        verdict=verdict,
        base=bs,
        candidate=cs,
        effect=effect,
        ci=None,
        p=None,
        floor=0.0,
        first_difference=first,
        note=note,
    )


def min_mann_whitney_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact Mann-Whitney test can give (complete separation,
    no ties): 2 / C(n1 + n2, n1). When it is not below alpha no data can be significant;
    benchstat's "need >= 4 samples to detect a difference at alpha level 0.05" is this bound
    for n1 == n2 (3 vs 3: 0.1; 4 vs 4: 0.029). It also catches what scipy's normal
    approximation hides: with ties, 3 vs 3 can report p = 0.047."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _mwu_p(x: np.ndarray, y: np.ndarray) -> float:
    if np.all(x == x[0]) and np.all(y == x[0]):
        # All ties: the rank variance is 0 and the test statistic undefined; nothing differs.
        return 1.0
    from scipy.stats import mannwhitneyu  # here, not at import: scipy costs seconds per CLI start

    p = float(mannwhitneyu(x, y, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(p) else p


def _g(v: float) -> str:
    return f"{v:.3g}"


@dataclass(frozen=True)
class Bootstrap:
    """How the CIs of a noisy comparison are resampled (seeded: reproducible)."""

    confidence: float = 0.95
    n_boot: int = 2000
    seed: int = 0


# Power the sample-size estimate of an *unknown* verdict aims at (one minus type-II error).
POWER = 0.8
# Asymptotic relative efficiency of the rank tests (Wilcoxon, Mann-Whitney) against the t test
# under normal noise: 3/pi. The normal-approximation sample size is divided by it.
_RANK_ARE = 3.0 / math.pi


def samples_needed(spread: float, delta: float, alpha: float, paired: bool) -> int | None:
    """Samples per side for a rank test at ``alpha`` (two-sided) to detect an effect of size
    ``delta`` with power :data:`POWER`, given the observed standard deviation ``spread`` (of the
    per-pair differences when ``paired``, of one side otherwise). Normal approximation:
    ``n = k (z_{1-alpha/2} + z_power)^2 spread^2 / delta^2`` with ``k`` 1 paired, 2 unpaired,
    over the rank tests' efficiency; never below the smallest n whose exact p can reach alpha
    (that n alone when there is no spread). None without an effect size to resolve."""
    if not (delta > 0.0 and math.isfinite(delta)) or not (spread >= 0.0 and math.isfinite(spread)):
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1.0 - alpha / 2.0) + NormalDist().inv_cdf(POWER)
    n = (1 if paired else 2) * (z * spread / delta) ** 2 / _RANK_ARE
    return max(least_samples(alpha, paired), math.ceil(n))


def least_samples(alpha: float, paired: bool) -> int:
    """The smallest sample size per side (pairs when ``paired``) whose exact rank test can reach
    a two-sided p below ``alpha`` at all: the design check of a suite and the floor of
    :func:`samples_needed` (0.05: 6 pairs, or 4 against 4)."""
    return next((k for k in range(1, 1024)
                 if (min_wilcoxon_p(k) if paired else min_mann_whitney_p(k, k)) < alpha), 1024)


def min_wilcoxon_p(n: int) -> float:
    """The smallest two-sided p of the exact signed-rank test with n non-zero differences
    (every difference of one sign): 2 / 2^n. 5 pairs: 0.0625, 6 pairs: 0.031."""
    return min(1.0, 2.0 / 2.0 ** n)


def _wilcoxon_p(d: np.ndarray) -> float:
    if not np.any(d):
        return 1.0  # every difference zero: nothing differs (the statistic is undefined)
    from scipy.stats import wilcoxon  # here, not at import: scipy costs seconds per CLI start

    p = float(wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
    return 1.0 if math.isnan(p) else p


@dataclass(frozen=True)
class _Evidence:
    """What a noisy comparison measured, before a verdict is drawn from it."""

    effect: float
    ci: tuple[float, float]
    p: float
    min_p: float  # the smallest p the test could give at these sample sizes
    identical: bool  # the two samples are equal (paired: every difference is zero)
    test: str  # "Wilcoxon" / "Mann-Whitney"


def _decide(ev: _Evidence, threshold: float, alpha: float) -> tuple[Verdict, str]:
    """The floor's three regions. *same*: the CI lies inside ``[-threshold, +threshold]``
    (boundaries included). *different*: the test is significant and the CI lies wholly beyond
    the floor (``ci_low > threshold`` or ``ci_high < -threshold``; with no floor, the CI
    excludes 0). A CI that straddles the floor (or touches it from outside) is *unknown*: the
    change may or may not matter, and more samples would say which."""
    ci_text = f"CI [{_g(ev.ci[0])}, {_g(ev.ci[1])}]"
    if ev.identical:
        return Verdict.SAME, f"identical samples, inside floor ±{_g(threshold)}"
    if -threshold <= ev.ci[0] and ev.ci[1] <= threshold:
        return Verdict.SAME, f"{ci_text} inside floor ±{_g(threshold)}"
    if ev.min_p >= alpha:
        return Verdict.UNKNOWN, f"{ev.test} p={ev.p:.2g}; p<{alpha:g} unreachable at this sample size"
    beyond = ev.ci[0] > threshold or ev.ci[1] < -threshold
    if ev.p < alpha and beyond and abs(ev.effect) > threshold:
        return Verdict.DIFFERENT, (f"{ev.test} p={ev.p:.2g}, effect {ev.effect:+.3g}, {ci_text} "
                                   f"beyond floor ±{_g(threshold)}")
    if ev.p >= alpha:
        why = f"not significant ({ev.test} p={ev.p:.2g}, alpha {alpha:.3g})"
    elif threshold:
        why = f"{ev.test} p={ev.p:.2g} but {ci_text} straddles the floor ±{_g(threshold)}"
    else:
        why = f"{ev.test} p={ev.p:.2g} but {ci_text} includes 0"
    return Verdict.UNKNOWN, f"{why}; {ci_text} not inside floor ±{_g(threshold)}"


def resolving_distance(effect: float, threshold: float) -> float:
    """How far the observed effect is from the nearest edge of the floor's regions (``±threshold``,
    or 0 with no floor): the margin a CI must clear for the verdict to be decided either way."""
    return abs(abs(effect) - threshold)


def _judged(ev: _Evidence, sides: tuple[Summary, Summary], threshold: float, alpha: float,
            spread: float) -> Comparison:
    """The Comparison of noisy evidence; an *unknown* one carries ``needed``: the samples per side
    a power calculation over the observed spread gives for the CI to clear the nearest edge of the
    floor (:func:`resolving_distance`) — never clamped to one more than measured, so an effect on
    the floor's edge says how far off a decision is."""
    verdict, note = _decide(ev, threshold, alpha)
    paired = ev.test == "Wilcoxon"
    needed = None
    if verdict == Verdict.UNKNOWN:
        n = sides[0].n
        distance = resolving_distance(ev.effect, threshold)
        needed = samples_needed(spread, distance, alpha, paired)
        unit = "paired samples" if paired else "samples"
        edge = f"the floor ±{_g(threshold)}" if threshold else "0"
        if needed is None:
            note += f"; the observed effect {ev.effect:+.3g} sits on {edge}: no sample size resolves it"
        elif needed > n:
            note += (f"; needs ≈ {needed - n} more {unit} per side (n={needed}) for the CI to clear "
                     f"{edge} (effect {ev.effect:+.3g}, {_g(distance)} from it)")
        else:
            note += (f"; n={needed} {unit} per side would usually resolve an effect {_g(distance)} from "
                     f"{edge}: this sample is borderline, measure again")
    return Comparison(kind=Kind.NOISY, verdict=verdict, base=sides[0], candidate=sides[1], effect=ev.effect,
                      ci=ev.ci, p=ev.p, floor=threshold, first_difference=None, note=note,
                      paired=paired, needed=needed)


def _sides(base: Sequence[float], candidate: Sequence[float], alpha: float,
           boot: Bootstrap) -> tuple[np.ndarray, np.ndarray, tuple[Summary, Summary]]:
    """Both samples checked, with their summaries (each side's own median CI)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    _check_boot(boot.confidence, boot.n_boot)
    x, y = _noisy_array(base), _noisy_array(candidate)
    bx, by = (summarize(v, confidence=boot.confidence, n_boot=boot.n_boot, seed=boot.seed) for v in (x, y))
    return x, y, (bx, by)


def compare_noisy(
    base: Sequence[float],
    candidate: Sequence[float],
    floor: Floor,
    alpha: float = 0.05,
    boot: Bootstrap = Bootstrap(),
) -> Comparison:
    """Three-way verdict for a noisy metric of two independent samples (unpaired design).

    * SAME: the two samples are equal, or the bootstrap CI of
      ``median(candidate) - median(base)`` lies inside ``[-threshold, +threshold]``
      (boundaries included; with real noise a zero floor can never give SAME).
    * DIFFERENT: Mann-Whitney ``p < alpha``, ``|effect| > threshold`` and the CI excludes 0,
      and the sample sizes can reach ``alpha`` at all.
    * UNKNOWN: otherwise; ``needed`` says how many samples per side would decide.

    ``threshold = floor.threshold(median(base))``. The two sides are resampled independently
    from streams derived from ``boot.seed``, so the result is reproducible.
    """
    x, y, (bs, cs) = _sides(base, candidate, alpha, boot)
    confidence, n_boot, seed = boot.confidence, boot.n_boot, boot.seed
    # Separate child streams: the summaries above reuse `seed` directly, and with n1 == n2 a
    # shared stream would pair the resamples of the two sides and narrow the CI falsely.
    rng_b, rng_c = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    diffs = _boot_medians(y, n_boot, rng_c) - _boot_medians(x, n_boot, rng_b)
    identical = bool(np.array_equal(np.sort(x), np.sort(y)))
    ev = _Evidence(cs.median - bs.median, _percentile_ci(diffs, confidence), _mwu_p(x, y),
                   min_mann_whitney_p(x.size, y.size), identical, "Mann-Whitney")
    spread = float(np.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / 2)) if min(x.size, y.size) > 1 else 0.0
    return _judged(ev, (bs, cs), floor.threshold(bs.median), alpha, spread)


def compare_paired(base: Sequence[float], candidate: Sequence[float], floor: Floor, alpha: float = 0.05,
                   boot: Bootstrap = Bootstrap(), center: str = "median") -> Comparison:
    """Three-way verdict for a noisy metric measured on the same prompts on both sides
    (``base[i]`` and ``candidate[i]`` are one prompt): a Wilcoxon signed-rank test on the
    per-prompt differences and a paired bootstrap CI of their median (the prompts are
    resampled, each keeping its two values).

    * SAME: every difference is zero, or the CI lies inside ``[-threshold, +threshold]``.
    * DIFFERENT: Wilcoxon ``p < alpha``, ``|median difference| > threshold``, the CI excludes
      0, and the number of pairs can reach ``alpha`` at all (6 pairs at 0.05).
    * UNKNOWN: otherwise; ``needed`` says how many prompts per side would decide.

    ``effect`` is the median of the differences (not the difference of the medians), or with
    ``center="mean"`` their mean, with a paired bootstrap CI of the mean: for a metric whose
    headline and floor are its mean (KL), a change confined to a few pairs moves the mean beyond
    the floor while the median stays put, so the median would read *same* beside it.
    """
    if center not in ("median", "mean"):
        raise ValueError(f"center must be 'median' or 'mean', got {center!r}")
    if len(base) != len(candidate):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(candidate)}")
    x, y, (bs, cs) = _sides(base, candidate, alpha, boot)
    d = y - x
    rng = np.random.default_rng(boot.seed)
    if center == "mean":
        boot_d = np.mean(d[rng.integers(0, d.size, size=(boot.n_boot, d.size))], axis=1)
    else:
        boot_d = _boot_medians(d, boot.n_boot, rng)
    ci = _percentile_ci(boot_d, boot.confidence) if d.size > 1 else (float(d[0]), float(d[0]))
    effect = float(np.mean(d) if center == "mean" else np.median(d))
    ev = _Evidence(effect, ci, _wilcoxon_p(d), min_wilcoxon_p(int(np.count_nonzero(d))), not np.any(d), "Wilcoxon")
    spread = float(np.std(d, ddof=1)) if d.size > 1 else 0.0
    return replace(_judged(ev, (bs, cs), floor.threshold(bs.median), alpha, spread), center=center)


def combine_verdicts(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict for many metrics: any DIFFERENT wins, then any UNKNOWN; none at all is
    UNKNOWN, because an empty check must not pass as SAME."""
    seen = {Verdict(v) for v in verdicts}
    if not seen:
        return Verdict.UNKNOWN
    if Verdict.DIFFERENT in seen:
        return Verdict.DIFFERENT
    if Verdict.UNKNOWN in seen:
        return Verdict.UNKNOWN
    return Verdict.SAME
