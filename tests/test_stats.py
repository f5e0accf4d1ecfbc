from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from harness.divergence import (
    k3,
    k3_per_token,
    kl_tails,
    pooled_tails,
    top1_agreement,
    topk_kl_per_token,
)
from harness.verdict_stats import (
    Bootstrap,
    Comparison,
    Floor,
    Kind,
    Summary,
    Verdict,
    combine_verdicts,
    compare_exact,
    compare_noisy,
    compare_paired,
    samples_needed,
    summarize,
)

# --------------------------------------------------------------------------- k3


def test_k3_identical_is_exactly_zero():
    lp = [-0.1, -2.5, -7.25, -0.0003, -float("inf")]
    assert k3(lp, list(lp)) == 0.0
    assert k3_per_token(lp, list(lp)) == [0.0] * 5


def test_k3_hand_computed():
    ref = [-0.5, -1.0, -2.0]
    test = [-0.6, -1.0, -1.5]
    terms = [math.exp(r) - 1 - r for r in (a - b for a, b in zip(ref, test))]
    assert k3_per_token(ref, test) == pytest.approx(terms, rel=1e-12)
    assert k3(ref, test) == pytest.approx(sum(terms) / 3, rel=1e-12)
    assert terms[1] == 0.0


@pytest.mark.parametrize("r", [1e-9, -1e-9, 1e-5, -3e-3])
def test_k3_tiny_r_is_r_squared_over_two(r):
    # exp(r) - 1 - r computed naively cancels to 0 or a negative number here.
    got = k3([r], [0.0])
    assert got > 0.0
    assert got == pytest.approx(r * r / 2 + r**3 / 6 + r**4 / 24, rel=1e-12)


def test_k3_is_positive_and_matches_formula_at_moderate_r():
    for r in (0.02, -0.02, 0.5, -3.0, 10.0):
        assert k3([r], [0.0]) == pytest.approx(math.expm1(r) - r, rel=1e-13)


def test_k3_infinite_logprob_gives_infinite_divergence():
    assert k3([-1.0], [-float("inf")]) == math.inf
    assert k3([-float("inf")], [-1.0]) == math.inf


def test_k3_nan_on_one_side_propagates():
    assert math.isnan(k3([float("nan"), -1.0], [-1.0, -1.0]))
    assert k3([float("nan")], [float("nan")]) == 0.0


def test_k3_rejects_length_mismatch_and_empty():
    with pytest.raises(ValueError, match="length"):
        k3([-1.0, -2.0], [-1.0])
    with pytest.raises(ValueError):
        k3([], [])
    with pytest.raises(ValueError):
        k3_per_token([], [])


# --------------------------------------------------------------------------- tails


def _planted(n: int = 200) -> tuple[list[float], list[float]]:
    test = [-1.0] * n
    ref = list(test)
    ref[50] = -1.0 + 1.0  # r = 1
    ref[120] = -1.0 + 2.0  # r = 2
    return ref, test


def test_kl_tails_planted_differences():
    ref, test = _planted()
    t = kl_tails(ref, test, tau=0.5)
    big, bigger = math.e - 2, math.exp(2) - 3
    assert t.n_tokens == 200
    assert t.first_divergent == 50
    assert t.median == 0.0
    assert t.max == pytest.approx(bigger, rel=1e-12)
    assert t.mean == pytest.approx((big + bigger) / 200, rel=1e-12)
    assert t.frac_over_tau == pytest.approx(2 / 200)
    assert t.tau == 0.5
    # Linear-interpolated 99th percentile of 198 zeros, big, bigger: rank 0.99 * 199 = 197.01.
    assert t.p99 == pytest.approx(0.01 * big, rel=1e-9)


def test_kl_tails_identical_and_one_ulp():
    lp = [-0.25 * i for i in range(1, 65)]
    t = kl_tails(lp, list(lp), tau=1e-9)
    assert t.first_divergent is None
    assert (t.mean, t.median, t.p99, t.max, t.frac_over_tau) == (0.0, 0.0, 0.0, 0.0, 0.0)

    # One ulp at position 7 is a divergence even though its k3 term rounds to ~0.
    other = list(lp)
    other[7] = math.nextafter(other[7], 0.0)
    t = kl_tails(lp, other, tau=1e-9)
    assert t.first_divergent == 7
    assert t.frac_over_tau == 0.0
    assert t.max < 1e-30


def test_pooled_tails_over_all_tokens():
    ref, test = [-1.0] * 100, [-1.0] * 100
    ref[50] = 0.0  # r = 1
    a = k3_per_token(ref, test)
    b = k3_per_token([-1.0, 0.0, -1.0], [-1.0, -1.0, -1.0])  # r = 1 at 1
    pooled = pooled_tails([a, [], b], tau=0.5)
    assert pooled.n_tokens == 103
    assert pooled.first_divergent is None
    assert pooled.max == pytest.approx(math.e - 2)
    assert pooled.mean == pytest.approx(2 * (math.e - 2) / 103)
    assert pooled.frac_over_tau == pytest.approx(2 / 103)
    assert pooled.median == 0.0
    with pytest.raises(ValueError):
        pooled_tails([[], []], tau=0.1)


# --------------------------------------------------------------------------- summaries


def test_floor_threshold():
    assert Floor().threshold(123.0) == 0.0
    assert Floor(absolute=0.5).threshold(1000.0) == 0.5
    assert Floor(absolute=0.5, relative=0.01).threshold(-1000.0) == 10.0
    assert Floor(absolute=20.0, relative=0.01).threshold(1000.0) == 20.0
    with pytest.raises(ValueError):
        Floor(absolute=-1.0)


def test_summarize_known_values_and_reproducible():
    values = np.random.default_rng(1).normal(10.0, 1.0, 25)
    s1 = summarize(values, seed=7)
    assert s1 == summarize(list(values), seed=7)
    assert s1.n == 25
    assert s1.median == float(np.median(values))
    assert s1.mean == pytest.approx(float(np.mean(values)))
    assert (s1.min, s1.max) == (float(values.min()), float(values.max()))
    assert s1.min <= s1.ci_low <= s1.median <= s1.ci_high <= s1.max
    assert summarize(values, seed=8) != s1


def test_summarize_small_and_invalid():
    assert summarize([3.5]) == Summary(n=1, median=3.5, ci_low=3.5, ci_high=3.5, mean=3.5, min=3.5, max=3.5)
    const = summarize([2.0] * 6)
    assert (const.ci_low, const.ci_high) == (2.0, 2.0)
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError):
        summarize([1.0, 2.0], confidence=1.0)


# --------------------------------------------------------------------------- exact


def test_compare_exact_same():
    c = compare_exact([0.0, -1.5, 7.0], [0.0, -1.5, 7.0])
    assert (c.kind, c.verdict) == (Kind.EXACT, Verdict.SAME)
    assert c.first_difference is None
    assert c.note == "identical (3 values)"
    assert (c.ci, c.p, c.floor, c.effect) == (None, None, 0.0, 0.0)


def test_compare_exact_first_difference_without_tolerance():
    base = [0.0, -1.0, -2.0, 0.0, 5.0]
    cand = [0.0, -1.0, -2.0, 1.2e-05, 6.0]
    c = compare_exact(base, cand)
    assert c.verdict == Verdict.DIFFERENT
    assert c.first_difference == 3
    assert c.note == "differs at index 3: 0.0 vs 1.2e-05"

    ulp = compare_exact([-0.7], [math.nextafter(-0.7, 0.0)])
    assert ulp.verdict == Verdict.DIFFERENT and ulp.first_difference == 0


def test_compare_exact_length_mismatch():
    c = compare_exact([1.0, 2.0, 3.0], [1.0, 2.0])
    assert c.verdict == Verdict.DIFFERENT
    assert c.first_difference == 2
    assert "lengths differ: 3 vs 2" in c.note

    c = compare_exact([1.0, 2.0, 3.0], [1.0, 9.0])
    assert c.first_difference == 1
    assert "lengths differ" in c.note and "index 1: 2.0 vs 9.0" in c.note


def test_compare_exact_nan_and_single_value():
    nan = float("nan")
    c = compare_exact([1.0, nan, 3.0], [1.0, nan, 3.0])
    assert c.verdict == Verdict.SAME
    assert c.base.median == 2.0  # NaN is compared, not averaged
    c = compare_exact([1.0, nan], [1.0, 2.0])
    assert c.verdict == Verdict.DIFFERENT and c.first_difference == 1
    assert compare_exact([42.0], [42.0]).verdict == Verdict.SAME
    assert compare_exact([42], [43]).verdict == Verdict.DIFFERENT


# --------------------------------------------------------------------------- noisy


def test_compare_noisy_same_distribution_inside_floor():
    rng = np.random.default_rng(11)
    base, cand = rng.normal(100.0, 1.0, 30), rng.normal(100.0, 1.0, 30)
    c = compare_noisy(base, cand, Floor(absolute=2.0))
    assert (c.kind, c.verdict) == (Kind.NOISY, Verdict.SAME)
    assert c.floor == 2.0
    assert c.ci is not None and -2.0 <= c.ci[0] <= c.effect <= c.ci[1] <= 2.0
    assert c.p is not None and c.p > 0.05
    assert c.note.startswith("CI [") and "inside floor ±2" in c.note
    assert c.first_difference is None


def test_compare_noisy_shift_is_different():
    rng = np.random.default_rng(12)
    base, cand = rng.normal(100.0, 1.0, 30), rng.normal(105.0, 1.0, 30)
    c = compare_noisy(base, cand, Floor(absolute=0.5))
    assert c.verdict == Verdict.DIFFERENT
    assert c.p is not None and c.p < 0.01
    assert c.effect == pytest.approx(5.0, abs=1.0)
    assert c.ci is not None and c.ci[0] > 0.5
    assert "beyond floor ±0.5" in c.note


def test_compare_noisy_zero_floor_noise_is_never_same():
    rng = np.random.default_rng(13)
    c = compare_noisy(rng.normal(0, 1, 20), rng.normal(0, 1, 20), Floor())
    assert c.verdict == Verdict.UNKNOWN
    assert "not significant" in c.note


def test_compare_noisy_three_vs_three_needs_more_samples():
    c = compare_noisy([10.0, 11.0, 12.0], [10.5, 11.5, 12.5], Floor(absolute=0.1))
    assert c.verdict == Verdict.UNKNOWN
    assert "p<0.05 unreachable at this sample size" in c.note
    assert c.needed is not None and c.needed > 3 and f"(n={c.needed})" in c.note

    # Fully separated, and scipy's tie-corrected approximation even reports p < 0.05,
    # but the exact test cannot go below 0.1 with 3 vs 3.
    c = compare_noisy([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], Floor())
    assert c.p is not None and c.p < 0.05
    assert c.verdict == Verdict.UNKNOWN
    assert "unreachable" in c.note and c.needed == 4  # 4 vs 4 can reach p = 0.029

    # Small samples may still be SAME when the whole CI sits inside the floor.
    c = compare_noisy([10.0, 10.1, 10.2], [10.05, 10.1, 10.15], Floor(absolute=1.0))
    assert c.verdict == Verdict.SAME


def test_compare_noisy_identical_constants_zero_floor_is_same_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare_noisy([3.0] * 5, [3.0] * 5, Floor())
    assert c.verdict == Verdict.SAME
    assert (c.ci, c.p, c.effect, c.floor) == ((0.0, 0.0), 1.0, 0.0, 0.0)
    assert compare_noisy([3.0], [3.0], Floor()).verdict == Verdict.SAME


def test_compare_noisy_relative_floor():
    rng = np.random.default_rng(14)
    base, cand = rng.normal(1000.0, 1.0, 30), rng.normal(1003.0, 1.0, 30)
    loose = compare_noisy(base, cand, Floor(relative=0.01))
    assert loose.verdict == Verdict.SAME
    assert loose.floor == pytest.approx(0.01 * float(np.median(base)))
    tight = compare_noisy(base, cand, Floor(relative=0.001))
    assert tight.verdict == Verdict.DIFFERENT
    assert tight.floor == pytest.approx(0.001 * float(np.median(base)))


def test_compare_noisy_reproducible_and_validated():
    rng = np.random.default_rng(15)
    base, cand = rng.normal(0, 1, 12), rng.normal(0.3, 1, 12)
    assert compare_noisy(base, cand, Floor(0.1), boot=Bootstrap(seed=3)) == compare_noisy(list(base), list(cand), Floor(0.1), boot=Bootstrap(seed=3))
    with pytest.raises(ValueError):
        compare_noisy([], [1.0], Floor())
    with pytest.raises(ValueError):
        compare_noisy([1.0, float("inf")], [1.0], Floor())
    with pytest.raises(ValueError):
        compare_noisy([1.0], [1.0], Floor(), alpha=0.0)


# --------------------------------------------------------------------------- paired


# Per-prompt accept lengths vary far more between prompts than a 10% drop moves one prompt:
# the unpaired tests cannot see the drop, the per-prompt differences can.
ACCEPT_BASE = [2.2, 3.9, 2.8, 4.6, 3.1, 2.5, 4.1, 3.4]
ACCEPT_DROP = [v * 0.9 + e for v, e in zip(ACCEPT_BASE, [0.01, -0.02, 0.0, 0.03, -0.01, 0.02, 0.0, -0.03])]


def test_paired_drop_is_different_where_unpaired_is_not():
    floor = Floor(relative=0.02)
    unpaired = compare_noisy(ACCEPT_BASE, ACCEPT_DROP, floor)
    paired = compare_paired(ACCEPT_BASE, ACCEPT_DROP, floor)
    assert unpaired.verdict == Verdict.UNKNOWN and not unpaired.paired
    assert paired.verdict == Verdict.DIFFERENT and paired.paired
    assert paired.p is not None and paired.p < 0.01  # 8 of 8 differences negative: p = 2/256
    assert paired.ci[1] < 0 and paired.effect == pytest.approx(
        float(np.median(np.subtract(ACCEPT_DROP, ACCEPT_BASE))))
    assert "Wilcoxon" in paired.note


def test_paired_identical_samples_are_same_even_with_a_zero_floor():
    for compare in (compare_paired, compare_noisy):
        c = compare(ACCEPT_BASE, list(ACCEPT_BASE), Floor())
        assert c.verdict == Verdict.SAME and "identical" in c.note
        assert c.needed is None
    # k3 of a non-deterministic build, bit-identical on both sides, no floor: same.
    k3 = [1e-5, 3e-4, 0.0, 2e-6, 7e-5]
    assert compare_paired(k3, k3, Floor()).verdict == Verdict.SAME


def test_paired_small_drift_inside_floor_is_same():
    cand = [v + d for v, d in zip(ACCEPT_BASE, [0.001, -0.002, 0.0, 0.002, -0.001, 0.0, 0.001, 0.0])]
    c = compare_paired(ACCEPT_BASE, cand, Floor(absolute=0.05))
    assert c.verdict == Verdict.SAME and c.ci[0] >= -0.05 and c.ci[1] <= 0.05


def test_paired_unknown_states_a_sample_count_that_decides():
    rng = np.random.default_rng(7)
    floor = Floor(absolute=0.1)

    def draw(n):
        base = rng.normal(3.0, 0.5, n)
        return base, base - 0.3 + rng.normal(0.0, 0.25, n)  # a drop of 3 floors, noisy

    c = compare_paired(*draw(4), floor)
    assert c.verdict == Verdict.UNKNOWN and c.needed is not None and c.needed > 4
    assert f"needs ≈ {c.needed - 4} more paired samples per side (n={c.needed})" in c.note
    # Measured again with that many prompts, it decides.
    assert compare_paired(*draw(c.needed), floor).verdict == Verdict.DIFFERENT


def test_paired_needs_six_pairs_to_reach_alpha():
    c = compare_paired([1.0] * 5, [2.0] * 5, Floor())
    assert c.verdict == Verdict.UNKNOWN and "unreachable" in c.note and c.needed == 6
    assert compare_paired([1.0] * 6, [2.0] * 6, Floor()).verdict == Verdict.DIFFERENT


def test_paired_validated_and_reproducible():
    with pytest.raises(ValueError, match="differ in length"):
        compare_paired([1.0, 2.0], [1.0], Floor())
    with pytest.raises(ValueError):
        compare_paired([1.0], [1.0], Floor(), alpha=1.0)
    a = compare_paired(ACCEPT_BASE, ACCEPT_DROP, Floor(0.01), boot=Bootstrap(seed=4))
    assert a == compare_paired(list(ACCEPT_BASE), list(ACCEPT_DROP), Floor(0.01), boot=Bootstrap(seed=4))
    assert Comparison.from_dict(json.loads(json.dumps(a.to_dict()))) == a


def test_samples_needed_normal_approximation():
    # (1.96 + 0.84)^2 ≈ 7.85; / (3/pi) ≈ 8.22 per unit of (spread/delta)^2
    assert samples_needed(1.0, 1.0, 0.05, paired=True) == 9
    assert samples_needed(1.0, 1.0, 0.05, paired=False) == 17
    assert samples_needed(1.0, 0.5, 0.05, paired=True) == 33
    assert samples_needed(0.0, 1.0, 0.05, paired=True) == 6  # no spread: what reaches alpha
    assert samples_needed(1.0, 0.0, 0.05, paired=True) is None


def test_comparison_from_a_file_without_pairing_fields():
    d = compare_noisy([1.0, 2.0, 3.0], [1.0, 2.0, 3.5], Floor()).to_dict()
    d.pop("paired", None), d.pop("needed", None)
    c = Comparison.from_dict(d)
    assert c.paired is False and c.needed is None


# --------------------------------------------------------------------------- serialisation


def _round_trip(c: Comparison) -> Comparison:
    return Comparison.from_dict(json.loads(json.dumps(c.to_dict())))


def test_comparison_json_round_trip():
    rng = np.random.default_rng(16)
    noisy = compare_noisy(rng.normal(5, 1, 10), rng.normal(9, 1, 10), Floor(0.2, 0.01))
    exact = compare_exact([0.0, -1.0, 2.0], [0.0, -1.0, 2.5])
    for c in (noisy, exact):
        d = json.loads(json.dumps(c.to_dict()))
        assert d["kind"] == c.kind.value and d["verdict"] == c.verdict.value
        assert _round_trip(c) == c
    assert isinstance(_round_trip(noisy).ci, tuple)
    assert json.loads(json.dumps(noisy.to_dict()))["ci"] == list(noisy.ci)
    s = noisy.base
    assert Summary.from_dict(json.loads(json.dumps(s.to_dict()))) == s


# --------------------------------------------------------------------------- combine


def test_combine_verdicts():
    S, D, U = Verdict.SAME, Verdict.DIFFERENT, Verdict.UNKNOWN
    assert combine_verdicts([S, S]) == S
    assert combine_verdicts([S, U, S]) == U
    assert combine_verdicts([U, D, S]) == D
    assert combine_verdicts(iter([D])) == D
    assert combine_verdicts([]) == U


# --------------------------------------------------------------------------- top-k KL

def test_topk_kl_identical_lists_are_exactly_zero():
    top = [[(-0.1, 5), (-2.5, 7)], [(-0.3, 1)]]
    assert topk_kl_per_token(top, [list(reversed(t)) for t in top]) == [0.0, 0.0]


def test_topk_kl_buckets_the_rest_of_the_mass():
    ref = [[(math.log(0.5), 1), (math.log(0.3), 2)]]  # other: 0.2
    test = [[(math.log(0.4), 1), (math.log(0.4), 3)]]  # token 2 unknown: lumped with other (0.6)
    p, q = [0.5, 0.5], [0.4, 0.6]  # shared token 1, then each side's other
    expected = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    assert topk_kl_per_token(ref, test) == [pytest.approx(expected)]


def test_topk_kl_is_infinite_where_the_test_side_has_no_mass_left():
    ref = [[(math.log(0.5), 1)]]
    test = [[(0.0, 1)]]  # all mass on token 1: nothing left for ref's other 0.5
    assert topk_kl_per_token(ref, test) == [math.inf]


def test_topk_kl_of_reordered_lists_is_bit_identical():
    """A pure reorder of either side's top-k list cannot move the KL by one bit: detcheck's own
    arithmetic sums in a canonical order (issue 44: 133 of 2,000 random top-8 pairs moved in their
    last bit when the shared tokens were summed in a set's insertion order)."""
    rng = np.random.default_rng(44)
    moved = []
    for i in range(2000):
        vocab = rng.choice(24, size=12, replace=False)
        probs = rng.dirichlet(np.ones(12))
        other = rng.dirichlet(np.ones(12))
        ref = [(math.log(p), int(t)) for p, t in zip(probs[:8], vocab[:8])]
        test = [(math.log(p), int(t)) for p, t in zip(other[:8], vocab[rng.permutation(12)[:8]])]
        base = topk_kl_per_token([ref], [test])[0]
        shuffled = ([ref[j] for j in rng.permutation(8)], [test[j] for j in rng.permutation(8)])
        again = topk_kl_per_token([shuffled[0]], [shuffled[1]])[0]
        if base.hex() != again.hex():
            moved.append((i, base.hex(), again.hex()))
    assert moved == []


def test_topk_kl_needs_equal_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        topk_kl_per_token([[(-1.0, 1)]], [])


def test_top1_agreement():
    ref = [[(-0.1, 5), (-2.0, 7)], [(-0.2, 9), (-1.0, 4)]]
    test = [[(-2.0, 7), (-0.1, 5)], [(-1.0, 9), (-0.2, 4)]]
    assert top1_agreement(ref, test) == 0.5
    with pytest.raises(ValueError):
        top1_agreement([], [])


def test_least_samples_is_where_the_exact_minimum_p_first_drops_below_alpha():
    from harness.verdict_stats import least_samples, min_mann_whitney_p, min_wilcoxon_p

    assert min_wilcoxon_p(5) == 0.0625 and min_wilcoxon_p(6) == 0.03125
    assert least_samples(0.05, paired=True) == 6 and least_samples(0.01, paired=True) == 8
    assert min_mann_whitney_p(3, 3) == 0.1 and least_samples(0.05, paired=False) == 4


def _on_the_floor(n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Paired samples whose differences are `shift` plus noise of spread 0.05."""
    rng = np.random.default_rng(n)
    base = rng.normal(3.0, 0.5, n)
    return base, base + shift + rng.normal(0.0, 0.05, n)


def test_an_effect_on_the_floor_is_unknown_at_every_size_with_a_power_estimate_not_one_more():
    # The floor is 10% of a base median of about 3.0 (0.3); the drop is exactly that.
    floor = Floor(relative=0.1)
    for n in (16, 17, 64):
        base, cand = _on_the_floor(n, -0.1 * float(np.median(_on_the_floor(n, 0.0)[0])))
        c = compare_paired(base, cand, floor)
        assert c.ci is not None and c.ci[0] < -c.floor < c.ci[1], (n, c.ci, c.floor)
        assert c.verdict == Verdict.UNKNOWN and "straddles the floor" in c.note, (n, c.note)
        # the CI must clear the floor's edge, which the effect sits next to: many more samples
        assert c.needed is not None and c.needed > n + 10, (n, c.needed, c.note)


def test_a_ci_wholly_beyond_the_floor_is_different_and_one_touching_it_is_not():
    base, cand = _on_the_floor(32, -0.6)
    c = compare_paired(base, cand, Floor(absolute=0.3))
    assert c.verdict == Verdict.DIFFERENT and c.ci is not None and c.ci[1] < -0.3
    # the same data against a floor as wide as the CI's far end: straddling, unknown
    wide = compare_paired(base, cand, Floor(absolute=-c.ci[0]))
    assert wide.verdict == Verdict.SAME
    mid = compare_paired(base, cand, Floor(absolute=-(c.ci[0] + c.ci[1]) / 2))
    assert mid.verdict == Verdict.UNKNOWN and "straddles" in mid.note


def test_resolving_distance_is_measured_from_the_nearest_edge():
    from harness.verdict_stats import resolving_distance

    assert resolving_distance(-0.25, 0.3) == pytest.approx(0.05)
    assert resolving_distance(0.4, 0.3) == pytest.approx(0.1)
    assert resolving_distance(-0.2, 0.0) == pytest.approx(0.2)


def test_a_change_in_one_pair_of_eight_moves_the_mean_and_not_the_median():
    """KL per prompt: seven prompts served alike, one far off. Judged on the median of the
    differences it read *same* (the median stays at the noise); on their mean, the number a KL
    row shows and its floor is declared on, the CI reaches past the floor: not *same*."""
    noise = [1e-17 * (1 + i % 3) for i in range(8)]
    cand = [v * 3 for v in noise]
    cand[4] = 0.2
    floor = Floor(absolute=1e-3)
    assert compare_paired(noise, cand, floor).verdict == Verdict.SAME  # the median hides it
    mean = compare_paired(noise, cand, floor, center="mean")
    assert mean.verdict == Verdict.UNKNOWN and mean.center == "mean", mean.note
    assert mean.effect == pytest.approx(0.2 / 8) and mean.ci[1] > 1e-3
    assert Comparison.from_dict(mean.to_dict()) == mean and mean.to_dict()["center"] == "mean"
    assert "center" not in compare_paired(noise, cand, floor).to_dict()  # files from before read the same
    # a shift on every pair is different either way
    shifted = [v + 0.01 for v in noise]
    assert compare_paired(noise, shifted, floor, center="mean").verdict == Verdict.DIFFERENT
    with pytest.raises(ValueError, match="center"):
        compare_paired(noise, cand, floor, center="mode")
