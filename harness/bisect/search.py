"""The k-ary search, pure: the first-parent range as a `Span` of indices, the k split points of a
round (`split_points`), the span after its verdicts (`narrow`), what the next round may pick
(`next_round_points`) and the bound ⌈log_(k+1) N⌉ + 1 (`round_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.bisect.session import DIFFERENT, SAME, SKIP


def round_bound(commits: int, slots: int) -> int:
    """⌈log_(k+1) N⌉ + 1, in integers (no float log at exact powers)."""
    rounds, reach = 0, 1
    while reach < commits:
        rounds, reach = rounds + 1, reach * (slots + 1)
    return rounds + 1


@dataclass(frozen=True)
class Span:
    """Where the first bad commit is, as indices into the history (oldest first): one of
    lo..hi, where hi is known bad and everything before lo known good; `skipped` commits
    cannot be tested and are never picked again."""

    lo: int
    hi: int
    skipped: frozenset[int] = frozenset()

    def testable(self) -> list[int]:
        return [i for i in range(self.lo, self.hi) if i not in self.skipped]

    def candidates(self) -> range:
        return range(self.lo, self.hi + 1)


def split_points(span: Span, slots: int) -> list[int]:
    """The up to `slots` commits to evaluate next: the testable ones, plus the known bad end,
    cut into slots + 1 parts of about equal size. Skipped commits are left out, so a split point
    that fell on one moves to its testable neighbour. Empty: nothing left to test."""
    testable = span.testable()
    parts = len(testable) + 1
    return sorted({testable[i * parts // (slots + 1) - 1] for i in range(1, slots + 1)
                   if i * parts // (slots + 1) >= 1})


def narrow(span: Span, codes: dict[int, int]) -> Span:
    """The span after one round of exit codes per index: up to the first bad, from just after
    the last good before it; 125s join the skipped. (A good after the first bad is outside.)"""
    hi = min([span.hi, *(i for i, c in codes.items() if c == DIFFERENT)])
    lo = max([span.lo, *(i + 1 for i, c in codes.items() if c == SAME and i < hi)])
    return Span(lo, hi, span.skipped | {i for i, c in codes.items() if c == SKIP})


def next_round_points(span: Span, points: list[int], slots: int) -> set[int]:
    """Every commit the next round may evaluate, whichever of `points` turns out to be the first
    bad (or none): what to check out while this round runs."""
    ahead: set[int] = set()
    for first_bad in range(len(points) + 1):
        codes = {i: SAME for i in points[:first_bad]}
        if first_bad < len(points):
            codes[points[first_bad]] = DIFFERENT
        ahead.update(split_points(narrow(span, codes), slots))
    return ahead - set(points)
