"""A curve as one line of Unicode block characters: a figure that survives being pasted where
an image link breaks (a PR description, an issue comment).

Two curves drawn with the same `x_max` and `y_max` share their axes, so their heights and
lengths compare character by character.
"""

from __future__ import annotations

from typing import Sequence

LEVELS = "▁▂▃▄▅▆▇█"


def columns(xs: Sequence[float], ys: Sequence[float], x_max: float, width: int) -> list[float | None]:
    """The curve on `width` columns over x in [0, x_max]: each column holds the largest y whose
    x falls in it (a peak survives any width); a column inside the curve's x range without a
    point repeats the column before it; a column outside that range is None."""
    if width < 1:
        raise ValueError(f"width must be at least 1, not {width}")
    out: list[float | None] = [None] * width
    if not xs:
        return out
    span = x_max if x_max > 0 else 1.0
    at = [min(width - 1, max(0, int(x * width / span))) for x in xs]  # product first: exact on integers
    for column, y in zip(at, ys):
        earlier = out[column]
        out[column] = y if earlier is None else max(earlier, y)
    for column in range(min(at) + 1, max(at) + 1):
        if out[column] is None:
            out[column] = out[column - 1]
    return out


def level(y: float, y_max: float) -> str:
    """The block for `y` on a scale where y_max is the full block and 0 the lowest (rounded to
    the nearest of the eight heights; values outside [0, y_max] are clipped)."""
    if y_max <= 0:
        return LEVELS[0]
    index = int(y / y_max * (len(LEVELS) - 1) + 0.5)
    return LEVELS[min(len(LEVELS) - 1, max(0, index))]


def sparkline(xs: Sequence[float], ys: Sequence[float], *, x_max: float, y_max: float, width: int) -> str:
    """`width` characters: the curve's columns as blocks, a space where the curve has no point
    (before it starts, after it ends); "" for an empty series."""
    if not xs:
        return ""
    return "".join(" " if y is None else level(y, y_max) for y in columns(xs, ys, x_max, width))
