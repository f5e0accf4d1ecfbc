"""Change points of a noisy series: where a revision's level shifts for good.

The detector is ruptures' PELT (exact optimal segmentation under a penalty, `ruptures.Pelt`)
over the revisions' medians with the rank cost (`model="rank"`): ranks make it
scale-free (no noise level to estimate: throughput in tok/s and accept length alike) and robust
to one revision measured on a loaded host (a heavy tail moves a rank by one). Why ruptures and
not Apache Otava's E-divisive or MongoDB's signal-processing-algorithms: ruptures needs only
NumPy and SciPy (already this project's), is maintained (1.1.10, wheels for 3.11+), and is a
library; apache-otava 0.8 pins numpy 2.2.0.* and pulls BigQuery, Postgres and Slack clients for
its CLI, and signal-processing-algorithms 2.1 pins numpy<2 and Python 3.11 only.

The penalty is 3·ln(n) per change point (n revisions): in simulation (300 series each, a step of
3 noise sd at a fixed commit) it gave 1% false change points in A/A series of 20 and 34
Gaussian points and 2% / 0.3% under Student-t(3) noise, while 2·ln(n) gave 7–9%. A detected
shift smaller than the probe's relative floor (`floor_rel`, what a paired comparison calls no
change) is dropped: a change point is a level shift that the paired comparison could call
different. Each remaining one is then confirmed by a paired run of its two neighbours.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

PENALTY_PER_LN_N = 3.0
MIN_SEGMENT = 2  # a level lasts at least two revisions: one outlier is no shift
MIN_POINTS = 2 * MIN_SEGMENT


@dataclass(frozen=True)
class Shift:
    index: int  # the first revision (of the measured ones) at the new level
    before: float
    after: float

    @property
    def relative(self) -> float:
        return self.after / self.before - 1 if self.before else float("inf")


def detector_description() -> dict[str, object]:
    import ruptures

    return {"library": "ruptures", "version": ruptures.__version__, "algorithm": "Pelt", "cost": "rank",
            "penalty": f"{PENALTY_PER_LN_N}*ln(n)", "min_segment": MIN_SEGMENT}


def shifts(medians: list[float], floor_rel: float = 0.0) -> list[Shift]:
    """The change points of a series of medians (oldest first), each with the medians of the
    segments on either side; shifts smaller than `floor_rel` of the level before are left out."""
    if len(medians) < MIN_POINTS or len(set(medians)) == 1:
        return []
    import ruptures  # deferred: only a history with a noisy series needs it

    signal = np.asarray(medians, dtype=float).reshape(-1, 1)
    ends = ruptures.Pelt(model="rank", min_size=MIN_SEGMENT, jump=1).fit(signal).predict(
        pen=PENALTY_PER_LN_N * float(np.log(len(medians))))
    bounds = [0, *ends]
    found = []
    for k in range(1, len(bounds) - 1):
        before = statistics.median(medians[bounds[k - 1]:bounds[k]])
        after = statistics.median(medians[bounds[k]:bounds[k + 1]])
        shift = Shift(bounds[k], float(before), float(after))
        if abs(shift.relative) >= floor_rel:
            found.append(shift)
    return found
