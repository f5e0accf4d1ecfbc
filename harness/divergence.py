"""How far one side's logprobs are from another's, per token and per prompt: SGLang's k3
estimator of KL and its tails, KL over the top-k distributions, top-1 agreement.

The per-sample maths the probes record as metrics (a k3 per prompt, a top-k KL per position);
how two sides' metrics are then judged is harness/verdict_stats.py. Every function is pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "KLTails",
    "TopLogprobs",
    "k3",
    "k3_per_token",
    "kl_tails",
    "pooled_tails",
    "same_value",
    "top1_agreement",
    "topk_kl_per_token",
]


# Below this |r|, expm1(r) - r cancels: both terms are ~r while the result is ~r**2/2,
# so the Taylor series is used instead (truncation error ~r**8/8! is far below one ulp).
_SERIES_BELOW = 1e-2


def same_value(a: float, b: float) -> bool:
    # NaN at the same position on both sides is the same observation, not a difference;
    # -0.0 == 0.0 is kept equal because it is the same number and its k3 term is 0.
    return a == b or (a != a and b != b)


def _pair_arrays(lp_ref: Sequence[float], lp_test: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    if len(lp_ref) != len(lp_test):
        raise ValueError(f"logprob sequences differ in length: {len(lp_ref)} vs {len(lp_test)}")
    if len(lp_ref) == 0:
        raise ValueError("k3 needs at least one token")
    return np.asarray(lp_ref, dtype=np.float64), np.asarray(lp_test, dtype=np.float64)


def _k3_terms(ref: np.ndarray, test: np.ndarray) -> np.ndarray:
    same = (ref == test) | (np.isnan(ref) & np.isnan(test))
    with np.errstate(invalid="ignore", over="ignore"):
        r = ref - test
        terms = np.expm1(r) - r
        small = np.abs(r) < _SERIES_BELOW
        if small.any():
            rs = r[small]
            # r**2/2 + r**3/6 + ... + r**7/7!, in Horner form; never negative for |r| < 1.
            poly = 1 / 5040
            for c in (1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2):
                poly = poly * rs + c
            terms[small] = poly * rs * rs
        # expm1(inf) - inf is NaN; the divergence is infinite (the test side put no mass there).
        terms[np.isposinf(r)] = np.inf
    # Identical values give exactly 0 even where the formula would not (both -inf gives
    # inf - inf = NaN), so a bit-exact run reports exactly 0.0, as SGLang's 1e-9 gate assumes.
    terms[same] = 0.0
    return terms


def k3_per_token(lp_ref: Sequence[float], lp_test: Sequence[float]) -> list[float]:
    """Per-position k3 terms ``exp(r) - 1 - r`` with ``r = lp_ref - lp_test``.

    ``lp_ref`` is the prefill replay, ``lp_test`` the decode, as in SGLang's
    ``kl_test_utils``. Positions with equal values give exactly 0.0; a NaN on one side only
    gives NaN, so a broken logprob is not hidden.
    """
    return _k3_terms(*_pair_arrays(lp_ref, lp_test)).tolist()


def k3(lp_ref: Sequence[float], lp_test: Sequence[float]) -> float:
    """SGLang's k3 estimate of KL for one prompt: the mean of the per-token terms."""
    return float(np.mean(_k3_terms(*_pair_arrays(lp_ref, lp_test))))


@dataclass(frozen=True)
class KLTails:
    """k3 is tail-dominated (a few bad tokens carry the mean), so the tails are reported too."""

    mean: float
    median: float
    p99: float
    max: float
    frac_over_tau: float  # fraction of tokens whose term is strictly greater than tau
    tau: float
    first_divergent: int | None  # first position whose two logprobs are not equal; None if all are
    n_tokens: int


def _tails(terms: np.ndarray, tau: float, first_divergent: int | None) -> KLTails:
    # An infinite term (one side's top-k holds all the mass the other leaves out) is a figure
    # like any other; interpolating a percentile between two of them reads inf - inf: NaN, quietly.
    with np.errstate(invalid="ignore"):
        median, p99 = float(np.median(terms)), float(np.percentile(terms, 99))
    return KLTails(
        mean=float(np.mean(terms)),
        median=median,
        p99=p99,
        max=float(np.max(terms)),
        frac_over_tau=float(np.count_nonzero(terms > tau)) / terms.size,
        tau=float(tau),
        first_divergent=first_divergent,
        n_tokens=int(terms.size),
    )


def kl_tails(lp_ref: Sequence[float], lp_test: Sequence[float], tau: float) -> KLTails:
    """Tails of the per-token k3 terms of one prompt.

    ``first_divergent`` uses the same equality as harness.verdict_stats.compare_exact (``==``, NaN equal to
    NaN, no tolerance): in deterministic mode any difference at all is the finding.
    """
    ref, test = _pair_arrays(lp_ref, lp_test)
    first = next(
        (i for i, (a, b) in enumerate(zip(ref.tolist(), test.tolist())) if not same_value(a, b)),
        None,
    )
    return _tails(_k3_terms(ref, test), tau, first)


def pooled_tails(per_prompt: Sequence[Sequence[float]], tau: float) -> KLTails:
    """Tails over the per-token k3 terms (from :func:`k3_per_token`) of all prompts together.

    Every token weighs the same, so ``mean`` is token-weighted; SGLang's gate is the mean of
    per-prompt means, which differs when prompts differ in length (take it from :func:`k3`).
    ``first_divergent`` is None: a term of 0.0 does not prove the two logprobs were equal
    (the term underflows for |r| below ~1e-154), and a flat position across prompts would not
    locate anything; locate the first divergence per prompt with :func:`kl_tails`.
    Prompts with no tokens are skipped.
    """
    chunks = [np.asarray(t, dtype=np.float64) for t in per_prompt if len(t) > 0]
    if not chunks:
        raise ValueError("pooled_tails needs at least one token")
    return _tails(np.concatenate(chunks), tau, None)



TopLogprobs = Sequence[tuple[float, int]]  # one position's top-k (logprob, token id) pairs


def topk_kl_per_token(ref: Sequence[TopLogprobs], test: Sequence[TopLogprobs]) -> list[float]:
    """KL(ref || test) per position over the top-k distributions: the tokens in both top-k
    lists, plus one "other" bucket holding each side's remaining mass.

    Only tokens both sides ranked have a known probability on both; every other token is in
    each side's "other" bucket, so this is the KL of a coarsening of the two full
    distributions: never above the true KL, and exactly 0.0 when the two lists are
    identical (as under deterministic inference). A side whose "other" has no mass while the
    reference's has some gives inf.
    """
    if len(ref) != len(test):
        raise ValueError(f"top-k sequences differ in length: {len(ref)} vs {len(test)}")
    return [_topk_kl(r, t) for r, t in zip(ref, test)]


def _topk_kl(ref: TopLogprobs, test: TopLogprobs) -> float:
    p_of, q_of = {int(tok): float(lp) for lp, tok in ref}, {int(tok): float(lp) for lp, tok in test}
    if p_of == q_of:
        return 0.0  # bit-exact lists: exactly zero, not a sum of rounding errors
    # In token-id order: a set's iteration order follows insertion, and a float sum depends on
    # its order, so two lists that differ only in order would give KLs a last bit apart.
    shared = sorted(p_of.keys() & q_of.keys())
    p = [math.exp(p_of[tok]) for tok in shared]
    q = [math.exp(q_of[tok]) for tok in shared]
    p.append(max(0.0, 1.0 - math.fsum(p)))
    q.append(max(0.0, 1.0 - math.fsum(q)))
    total = 0.0
    for pi, qi in zip(p, q):
        if pi > 0.0:
            total += math.inf if qi == 0.0 else pi * math.log(pi / qi)
    return max(total, 0.0)  # a coarsened KL is >= 0; rounding may leave -1e-17


def top1_agreement(ref: Sequence[TopLogprobs], test: Sequence[TopLogprobs]) -> float:
    """Share of positions whose most likely token is the same on both sides."""
    if len(ref) != len(test) or not ref:
        raise ValueError(f"top-k sequences must be non-empty and equally long: {len(ref)} vs {len(test)}")
    agree = sum(_top1(r) == _top1(t) for r, t in zip(ref, test))
    return agree / len(ref)


def _top1(top: TopLogprobs) -> int | None:
    return int(max(top)[1]) if top else None
