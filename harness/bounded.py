"""The one way detcheck reads what it did not produce in this process: files (results, store
cells, baselines, suites, matrix files, bisect sessions) and servers' answers, each read a block
at a time up to a cap that says what it is for. Past its cap, a read stops with `TooLarge`,
whose message names the cap: a hostile or broken source (a 1 GiB answer, a gzip bomb, a
results.json of gigabytes) costs the cap's memory at most, never what it holds.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

_BLOCK = 1 << 20  # bytes asked for per read: a large read is a few hundred calls, a small one one


@dataclass(frozen=True)
class SizeCap:
    """The most bytes one read of `what` may yield (after inflating, for a gzipped file)."""

    bytes: int
    what: str  # "a result file", "a server's answer": what the cap is on, as a message names it

    def __str__(self) -> str:
        mib = self.bytes / 2**20
        return f"{mib:g} MiB" if mib >= 1 else f"{self.bytes:,} bytes"


# Result documents (results.json, store cells, baselines, caches): 15× the largest committed GPU
# run (16.6 MB inflated, validate-pool/release-inkling).
RESULT_DOCUMENT = SizeCap(256 * 2**20, "a result file")
# What a person writes (suites, matrix.toml, an env file): the largest checked-in one is 6 KB.
INPUT_FILE = SizeCap(16 * 2**20, "an input file")
# One HTTP answer of a server: a /generate batch with top-k logprobs of every position runs to
# tens of MB (64 prompts × 2,048 positions × top-20 ≈ 90 MB); $DETCHECK_MAX_ANSWER_MB raises it.
SERVER_ANSWER = SizeCap(int(os.environ.get("DETCHECK_MAX_ANSWER_MB", "256")) * 2**20, "a server's answer")
# What a probe reads of a server's log between two marks (its requests' scheduler lines).
SERVER_LOG = SizeCap(256 * 2**20, "a server's log")
# A health check's answer is a status and a few words.
HEALTH_ANSWER = SizeCap(2**20, "a health check's answer")


class TooLarge(ValueError):
    """A read went past its cap (a ValueError, as a malformed document is: a reader that
    reports those as damaged reports this too)."""

    def __init__(self, cap: SizeCap, where: str = ""):
        super().__init__(f"{where + ': ' if where else ''}larger than {cap}, the most detcheck reads of {cap.what}")
        self.cap = cap


def read_bounded(read: Callable[[int], bytes], cap: SizeCap, where: str = "") -> bytes:
    """All that `read(n)` yields until it yields b"", or TooLarge once it passes `cap`: at
    most one block past the cap is ever held."""
    blocks: list[bytes] = []
    total = 0
    while True:
        block = read(min(_BLOCK, cap.bytes + 1 - total))
        if not block:
            return b"".join(blocks)
        blocks.append(block)
        total += len(block)
        if total > cap.bytes:
            raise TooLarge(cap, where)


def read_file(path: Path, cap: SizeCap) -> bytes:
    """A file's bytes, inflated where its name ends in .gz or .xz, up to `cap` (TooLarge naming
    the file past it). Open errors are the caller's to word (OSError, gzip.BadGzipFile,
    lzma.LZMAError, EOFError)."""
    with _open(path) as f:
        return read_bounded(f.read, cap, str(path))


def _open(path: Path) -> io.BufferedIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def read_file_text(path: Path, cap: SizeCap = INPUT_FILE) -> str:
    """A UTF-8 text file up to `cap` (UnicodeDecodeError where it is not UTF-8)."""
    return read_file(path, cap).decode()
