"""Numbers and Markdown tables as text: one way for every layer that writes them (a probe's
table cell, a reproducer's expectation, the report). Standard library only, so any module may
import it; the report's own formatting (a cell's default line, portable paths) is
harness/report/format.py."""

from __future__ import annotations

import difflib
import math
import re
import shlex
from typing import Any, Iterable, Sequence


def fmt(x: Any, digits: int = 3) -> str:
    """Numbers for tables: exact zero stays 0, small values in scientific notation."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) < 1e-3 or abs(x) >= 1e6:
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def value_label(value: float | None) -> str:
    """What is wrong with a logprob no answer may hold: null, NaN or inf."""
    if value is None:
        return "null"
    return "NaN" if value != value else ("inf" if value > 0 else "-inf")


def fmt_pair(a: float, b: float, digits: int = 3) -> tuple[str, str]:
    """Two values of an exact comparison, each at the fewest significant digits (`digits` at
    least) that still tell them apart: there is no tolerance, so "0.5 → 0.5" would hide a change
    in the 7th digit, and 17 digits say nothing the first three do not."""
    for d in range(digits, 18):
        shown = fmt(a, d), fmt(b, d)
        if shown[0] != shown[1] or a == b:
            return shown
    return repr(a), repr(b)


def fmt_distinct(values: Sequence[Any], digits: int = 3) -> list[str]:
    """Several values of an exact comparison shown together (each side's answer and replay),
    every float to the significant digit where any two that differ first differ (`digits` at
    least): two pairs each told apart within itself ("hit -0.777, replay -0.776" on both sides)
    may still hide that the sides differ (-0.77745 vs -0.77749). Other values as they are."""
    finite = sorted({v for v in values if isinstance(v, float) and math.isfinite(v)})
    d = max([digits, *(_first_differing_digit(a, b) for a, b in zip(finite, finite[1:]))])
    shown = [fmt(v, d) if isinstance(v, float) else str(v) for v in values]
    if len({fmt(v, d) for v in finite}) == len(finite):
        return shown
    return [repr(v) if isinstance(v, float) else str(v) for v in values]  # beyond what fmt shows (≥ 1000)


def _first_differing_digit(a: float, b: float) -> int:
    """The significant digit (1: the first) at which two different finite floats first differ."""
    x, y = f"{a:.16e}", f"{b:.16e}"
    (mx, ex), (my, ey) = x.split("e"), y.split("e")
    if ex != ey or (a < 0) != (b < 0):
        return 1
    return next((i for i, (p, q) in enumerate(zip(mx.lstrip("-").replace(".", ""), my.lstrip("-").replace(".", "")), 1)
                 if p != q), 17)


def displayable(text: str) -> str:
    """`text` as any UTF-8 output takes it: a name the file system gave as undecodable bytes (a
    suite, model or --out name that is not UTF-8 arrives as surrogate escapes) shows its
    undecodable bytes as U+FFFD instead of failing the write."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# Characters a terminal acts on (ESC opens a set-title or clear-screen sequence, C1's CSI one
# too) and XML 1.0 cannot hold at all (NUL, the other C0 controls, U+FFFE, U+FFFF); tab and line
# feed are text. A lone surrogate (an undecodable file name's byte) is `displayable`'s.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")


def printable(text: str) -> str:
    """`text` with every control character shown as its escape (ESC as `\\x1b`): what a server's
    coloured log line or a hostile results file holds reaches no terminal or XML reader as a
    control. JSON needs none of this: its writer escapes them, and keeps the text exact."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                        else f"\\u{ord(m.group(0)):04x}", text)


def one_line(text: str) -> str:
    """`text` on one line, printable: every line break (\\n, \\r, Unicode's separators) a space.
    A line of its own is where Markdown opens a block and a shell runs a command."""
    return printable(" ".join(text.splitlines()))


def md_escape(text: str) -> str:
    """Text that stays inside one Markdown table cell, its Markdown kept (a cell may hold
    `code`), no HTML tag opened: `<` is the only character that opens one."""
    return one_line(text).replace("|", "\\|").replace("<", "&lt;")


# What Markdown reads as markup anywhere in a line; `<` and `&` as HTML (a tag, an entity).
_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]#|~!])")


def md_text(text: str) -> str:
    """Text from elsewhere (a commit subject, a name read from a results file) shown as it is
    on one line: no Markdown or HTML of its own takes effect."""
    text = one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCTUATION.sub(r"\\\1", text)


def md_code(text: str) -> str:
    """`text` as a Markdown code span: fenced by one backtick more than its longest run of
    them, so none inside can end it (CommonMark), on one line."""
    text = one_line(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(lines: Iterable[str], info: str = "") -> list[str]:
    """Lines as a fenced code block whose fence no line of theirs can close: one backtick more
    than the longest run that opens any of them (a log line of ``` would end a fixed fence and
    let the rest render as Markdown and HTML). An item may hold line breaks (a shell word quoted
    across lines): each of its lines counts."""
    lines = [printable(line) for line in lines]
    longest = max((len(m.group(1)) for item in lines for line in item.split("\n")
                   if (m := re.match(r"\s*(`+)", line))), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", *lines, fence]


def md_table(header: Iterable[str], body: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table's lines: the header as given, every body cell escaped."""
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(str(c)) for c in row) + " |" for row in body]
    return lines


class ShellText(str):
    """Shell text put into a line as written, never quoted: an expansion the reader's shell is
    meant to make (`"$PORT"`). Only this program's own constants are ShellText; a string read
    from a results file is a plain `str`, quoted."""


def shell_join(words: Iterable[str]) -> str:
    """`words` as one shell line: each shlex-quoted but a ShellText, so pasting the line runs
    only what it says (shlex.join, with the one expansion the line means to make)."""
    return " ".join(w if isinstance(w, ShellText) else shlex.quote(w) for w in words)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """"1 configuration", "2 configurations" ("1 value", "8 values")."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """"; did you mean 'main'?" for the known name closest to a mistyped one, else "": an
    error about a name the user typed names the one they likely meant."""
    close = difflib.get_close_matches(given, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def shortened(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut at a word's end with "…" where it is longer (a
    word longer than the limit alone is cut inside it)."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    words = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return words.rstrip(" ,;:") + "…"
