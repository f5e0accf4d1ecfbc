"""Where detcheck keeps things: the project's own files and the cache shared by runs.

Standard library only: noxfile.py and the demo/matrix modules import this without the
harness's runtime dependencies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """$DETCHECK_CACHE_DIR, else $XDG_CACHE_HOME/detcheck, else ~/.cache/detcheck."""
    root = os.environ.get("DETCHECK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "detcheck")
    # Absolute: a relative value would follow the working directory of each git and server call.
    return Path(os.path.abspath(os.path.expanduser(root)))


def sha_cache_file(kind: str, target: str, sha: str | None, suffix: str) -> Path | None:
    """Where a per-revision fact (--help text, interpreter metadata) is kept; None when the
    revision has no sha to key it by (an installed package)."""
    return cache_dir() / kind / f"{target}-{sha}{suffix}" if sha else None


def safe_name(name: str) -> str:
    """A configuration, probe or repo name as a file-name part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


@contextlib.contextmanager
def file_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """An exclusive fcntl lock held for the block: runs sharing one cache take turns. Without
    `wait`, a lock another process holds raises BlockingIOError at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
