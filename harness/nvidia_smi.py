"""The one reader of nvidia-smi: every module that asks about this machine's GPUs asks here.

Standard library only (harness.matrix, which noxfile.py imports in a bare interpreter, can read
it). `query` runs one `--query-<what>=<fields> --format=csv,noheader,nounits` and returns its
rows as field lists; `NvidiaSmiError` says why there are none (absent, exited non-zero, timed
out, answered another shape). `gpu_names` is the matrix's question (names of the GPUs this
process may use; None without an answer).
"""

from __future__ import annotations

import os
import shutil
import subprocess

QUERY_TIMEOUT_S = 30


class NvidiaSmiError(Exception):
    """nvidia-smi gave no rows to read; `absent` where it is not on PATH at all."""

    def __init__(self, message: str, absent: bool = False):
        super().__init__(message)
        self.absent = absent


def available() -> bool:
    return shutil.which("nvidia-smi") is not None


def query(what: str, fields: tuple[str, ...]) -> list[list[str]]:
    """`nvidia-smi --query-<what>=<fields>` (what: "gpu", "compute-apps") as rows of stripped
    fields, one row per line, each with exactly len(fields) fields."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise NvidiaSmiError("absent", absent=True)
    args = (f"--query-{what}={','.join(fields)}", "--format=csv,noheader,nounits")
    try:
        proc = subprocess.run([smi, *args], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NvidiaSmiError(f"nvidia-smi {args[0]}: {exc}") from None
    if proc.returncode != 0:
        raise NvidiaSmiError(f"nvidia-smi {args[0]} exited {proc.returncode}")
    rows = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        row = [f.strip() for f in line.split(",")]
        if len(row) != len(fields):
            raise NvidiaSmiError(f"nvidia-smi answered {line!r}, not {len(fields)} fields")
        rows.append(row)
    return rows


def gpu_names(visible: str | None = None) -> list[str] | None:
    """This machine's GPUs as nvidia-smi names them, only as many as CUDA_VISIBLE_DEVICES (or
    `visible`) lets this process use; None without nvidia-smi or an answer from it."""
    try:
        names = [name for name, in query("gpu", ("name",))]
    except NvidiaSmiError:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None:
        names = names[: len([d for d in visible.split(",") if d.strip()])]
    return names
