"""Bisect: the first commit between a good and a bad revision whose probe verdict flips.

`git bisect run` drives the search in a worktree of its own under the cache directory, so
the user's checkout (and any bisect of theirs: bisect state is per worktree) is untouched.
It runs with `--no-checkout`: git only moves BISECT_HEAD, and the pipeline checks each commit
out once, in the per-sha worktree `detcheck run` uses too.

The predicate (`detcheck bisect-step`) is one good-vs-commit run of the normal pipeline, so
the good endpoint is measured once and every commit's cells land in the store: a re-run, or
a bisect after `detcheck run`, reuses them. Its exit code is git's protocol: 0 same as good,
1 different, 125 cannot be tested (checkout, `--help` or launch failed, n/a at that
revision, or still *unknown* with the most prompts allowed), 128 the good endpoint itself
failed (aborts the bisect). An *unknown* verdict is measured again with the prompts its
comparison says would resolve it (twice as many where it gives no estimate), up to
`max_scale` times the suite's. Each step prints where its results are.

With k slots (k > 1) the driver is this module instead of `git bisect run`: the first-parent
history `git rev-list --reverse --first-parent good..bad` is split into k + 1 parts, the k split
points are evaluated at once (k threads, each its own run directory, one shared store), and the
range narrows to the part between the last good and the first bad of them: at most
⌈log_(k+1) N⌉ + 1 rounds. A skipped split point (exit 125) is left out of later picks, as
`git bisect skip` does; when only skipped commits remain, the range is reported in history order.

The culprit is confirmed as in Pinpoint and SGLang #25647: the bad endpoint with that commit
reverted must compare *same* to good.
"""

from __future__ import annotations

from harness.bisect.driver import BisectResult, RoundEvaluator, bisect
from harness.bisect.search import Span, narrow, next_round_points, round_bound, split_points
from harness.bisect.session import (ABORT, DIFFERENT, SAME, SKIP, BisectSpec, Evaluation, read_log,
                                    session_dir_for)
from harness.bisect.predicate import evaluate, judge, next_scale, step

# The package's face: its modules, in the order they import one another, are session → predicate
# → search (k-ary, pure) → driver.
__all__ = ["ABORT", "DIFFERENT", "SAME", "SKIP", "BisectResult", "BisectSpec", "Evaluation", "RoundEvaluator",
           "Span", "bisect", "evaluate", "judge", "narrow", "next_round_points", "next_scale", "read_log",
           "round_bound", "session_dir_for", "split_points", "step"]
