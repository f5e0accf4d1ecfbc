"""Declared parameters: what a `[probe.<name>]` (or `[workload]`) table may carry, checked
before anything is launched.

A Param says its type, default, allowed values and whether it changes what is measured
(MEASURED: part of a stored cell's key) or only how the samples are judged (JUDGED: changing
it re-judges stored cells without a launch).
"""

from __future__ import annotations

import difflib
import math
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable

from harness.errors import UsageError


class ParamRole(str, Enum):
    MEASURED = "measured"
    JUDGED = "judged"


@dataclass(frozen=True)
class Param:
    """One parameter. `type` is int, float, bool, str, list[X] or dict[str, X]; a default of
    None means "not set" (e.g. a workload override that falls back to the suite's [workload])."""

    name: str
    type: Any
    default: Any
    doc: str
    role: ParamRole
    low: float | None = None  # inclusive bounds, for a number or each number of a list
    high: float | None = None
    choices: tuple[Any, ...] = ()
    # Further constraints on a well-typed value: a message saying what is wrong, or None.
    check: Callable[[Any], str | None] | None = None

    def validate(self, value: Any, where: str) -> Any:
        """The value, typed (an int given for a float becomes a float), or UsageError."""
        at = f"{where}.{self.name}"
        typed = _typed(self.type, value, at)
        for number in _numbers(typed):
            if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
                raise UsageError(f"{at}: {number!r} is out of range [{_bound(self.low)}, {_bound(self.high)}]")
        for item in typed if isinstance(typed, list) else [typed]:
            if self.choices and item not in self.choices:
                raise UsageError(f"{at}: {item!r} is not one of {', '.join(map(repr, self.choices))}")
        problem = self.check(typed) if self.check else None
        if problem:
            raise UsageError(f"{at}: {problem}")
        return typed


def validate_params(params: Iterable[Param], raw: Any, where: str) -> dict[str, Any]:
    """Every declared parameter, from `raw` where given and its default otherwise."""
    declared = {p.name: p for p in params}
    if not isinstance(raw, dict):
        raise UsageError(f"{where} must be a table")
    reject_unknown(where, raw, declared)
    return {name: p.validate(raw[name], where) if name in raw else p.default
            for name, p in declared.items()}


def reject_unknown(where: str, keys: Iterable[str], known: Iterable[str]) -> None:
    """UsageError for the first key not in `known`, naming the closest known one: a mistyped
    key must never silently drop the setting it meant to make."""
    known = sorted(known)
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            raise UsageError(f"{where}: unknown key {key!r}{hint}")


def _typed(expected: Any, value: Any, at: str) -> Any:
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin is list:
        if not isinstance(value, list):
            raise UsageError(f"{at}: expected a list, got {_kind(value)}")
        return [_typed(args[0], v, f"{at}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(f"{at}: expected a table, got {_kind(value)}")
        return {str(k): _typed(args[1], v, f"{at}.{k}") for k, v in value.items()}
    # bool is an int in Python, never in a suite: `prompts = true` is a mistake.
    if expected is bool and isinstance(value, bool):
        return value
    if expected is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if expected is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise UsageError(f"{at}: {value!r} is not a finite number")
        return float(value)
    if expected is str and isinstance(value, str):
        return value
    raise UsageError(f"{at}: expected {_name(expected)}, got {_kind(value)} {value!r}")


def _numbers(value: Any) -> list[float]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _bound(b: float | None) -> str:
    return "∞" if b is None else f"{b:g}"


def _name(t: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(t, str(t))


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)

