"""The sparkline maths: columns over a shared x axis, eight heights over a shared y scale."""

from __future__ import annotations

import pytest

from harness.sparkline import LEVELS, columns, level, sparkline


def test_a_straight_line_climbs_through_every_height():
    xs = list(range(8))
    assert sparkline(xs, xs, x_max=7, y_max=7, width=8) == "▁▂▃▄▅▆▇█"


def test_heights_round_to_the_nearest_of_eight():
    assert [level(y, 14) for y in (0, 0.99, 1, 2.99, 3, 13, 14)] == ["▁", "▁", "▂", "▂", "▃", "█", "█"]
    assert level(-5, 10) == "▁" and level(50, 10) == "█"  # clipped to the scale


def test_a_column_keeps_the_largest_value_in_it():
    """Eight points on two columns: each column shows its peak, never an average."""
    xs, ys = list(range(8)), [0, 7, 0, 0, 0, 0, 3, 0]
    assert columns(xs, ys, x_max=8, width=2) == [7, 3]
    assert sparkline(xs, ys, x_max=8, y_max=7, width=2) == "█▄"


def test_two_curves_share_the_scale_they_are_drawn_on():
    """A curve at a tenth of the other's peak stays low beside it, and one that ends early
    leaves blanks after its last point."""
    long = sparkline([0, 50, 100], [100, 100, 100], x_max=100, y_max=100, width=4)
    short = sparkline([0, 50], [10, 10], x_max=100, y_max=100, width=4)
    assert long == "████"
    assert short == "▂▂▂ "


def test_columns_between_sparse_points_repeat_the_one_before():
    assert columns([0, 9], [2, 5], x_max=10, width=5) == [2, 2, 2, 2, 5]
    assert columns([6], [4], x_max=10, width=5) == [None, None, None, 4, None]


def test_a_flat_series_is_one_height():
    assert sparkline([1, 2, 3], [5, 5, 5], x_max=3, y_max=5, width=6) == "  ████"
    assert set(sparkline(range(10), [0] * 10, x_max=9, y_max=0, width=5)) == {LEVELS[0]}  # all zero


def test_an_empty_series_draws_nothing():
    assert sparkline([], [], x_max=0, y_max=0, width=10) == ""
    assert columns([], [], x_max=10, width=3) == [None, None, None]


def test_a_width_below_one_is_refused():
    with pytest.raises(ValueError, match="width must be at least 1"):
        columns([1], [1], x_max=1, width=0)
