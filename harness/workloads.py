"""Prompt sets as token ids: seeded synthetic prompts, or LongBench-v2 when it is on disk.

The harness runs servers with `--skip-tokenizer-init`, so prompts are ids. A workload's
fingerprint is a hash of its ids: results are reused only for exactly the same prompts.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from harness.errors import UsageError
from harness.suite import WorkloadSpec


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: tuple[tuple[int, ...], ...]
    output_len: int
    spec: WorkloadSpec

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256(json.dumps([self.output_len, self.prompts]).encode())
        return h.hexdigest()[:16]


def build(spec: WorkloadSpec) -> Workload:
    if spec.kind == "longbench":
        prompts = _longbench(spec)
    else:
        rng = random.Random(spec.seed)
        lo, hi = spec.prompt_len
        prompts = tuple(
            tuple(rng.randrange(spec.low_token, spec.vocab) for _ in range(rng.randint(lo, hi)))
            for _ in range(spec.prompts)
        )
    return Workload(name=f"{spec.kind}-{spec.prompts}x{spec.output_len}", prompts=prompts,
                    output_len=spec.output_len, spec=spec)


def suffix_token(spec: WorkloadSpec) -> int:
    """The id appended for a decode-cache-hit turn 2 (SGLang's helper appends ',')."""
    return spec.low_token


def _longbench(spec: WorkloadSpec) -> tuple[tuple[int, ...], ...]:
    """LongBench-v2 contexts, mapped to ids byte-wise (no tokenizer: servers skip it).

    Byte ids keep the data's real repetition structure, which is what prefix caching and
    attention see; the ids are folded into the model's vocabulary above the special tokens.
    """
    try:
        import datasets  # optional extra
    except ImportError:
        raise UsageError("workload kind 'longbench' needs the 'datasets' package "
                         "(pip install 'sglang-detcheck[longbench]')") from None
    try:
        ds = datasets.load_dataset(spec.path or "THUDM/LongBench-v2", split="train")
    except Exception as exc:  # offline with no local copy: say so plainly
        raise UsageError(f"LongBench-v2 is not available offline ({type(exc).__name__}); "
                         "set [workload].path to a local copy") from None
    rng = random.Random(spec.seed)
    lo, hi = spec.prompt_len
    width = spec.vocab - spec.low_token
    rows = list(ds.select(range(min(spec.prompts, len(ds)))))
    return tuple(
        tuple(spec.low_token + (b % width) for b in row["context"].encode("utf-8")[: rng.randint(lo, hi)])
        for row in rows
    )
