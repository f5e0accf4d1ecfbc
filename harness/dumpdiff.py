"""Two directories of SGLang tensor dumps compared in forward order (`detcheck localize`).

Run as `python -m harness.dumpdiff BASE_DIR CANDIDATE_DIR` by the servers' interpreter (the
one with torch: the harness itself never imports it); prints one JSON object on stdout.

The layout is SGLang 0.5.16's dumper (`sglang.srt.debug_utils.dumper._Dumper._dump_single`):
one `torch.save` file per tensor, `{"value": tensor, "meta": {...}}`, named by its tags,
`k=v` joined by `___` (`step`, `rank`, `dump_index`, `name`, `recompute_status`, then the
context's, e.g. `layer_id`). A base file is paired with the candidate's of the same tags but
`dump_index`, the n-th such on each side with the n-th (SGLang's `dump_loader.find_row`
pairing, with its `duplicate_index`). SGLang's own `dump_comparator` prints prose per pair
(and needs polars); this reads the same files and answers in JSON.

Pairs are walked in the base's order (step, dump_index) until the first that differs (bit for
bit: a NaN equals a NaN in the same place) or has no partner; the answer holds the pairs of that
forward pass up to it, or where none differs the candidate's first unpaired file (appended to
its forward pass's entries: a tensor one side alone dumped is a difference, `only` names the side).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

# Entries of the deciding forward pass written back at most: the last ones before the difference.
MAX_ENTRIES = 400


def tags_of(path: Path) -> dict[str, str]:
    """A dump file's tags from its name (SGLang's `dump_loader.parse_meta_from_filename`)."""
    return dict(kv.split("=", 1) for kv in path.stem.split("___") if "=" in kv)


def ordered(directory: Path) -> list[tuple[tuple[Any, ...], dict[str, str], Path]]:
    """(pairing key, tags, path) per dump file, in forward order; the key is the tags but
    `dump_index`, plus how many files with those tags came before it."""
    files = sorted(((tags_of(p), p) for p in directory.glob("*.pt")),
                   key=lambda tp: (int(tp[0].get("step", 0)), int(tp[0].get("dump_index", 0))))
    seen: dict[tuple[Any, ...], int] = {}
    out = []
    for tags, path in files:
        key = tuple(sorted((k, v) for k, v in tags.items() if k != "dump_index"))
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(((*key, n), tags, path))
    return out


def _value(path: Path) -> Any:
    import torch

    obj = torch.load(path, weights_only=False, map_location="cpu")
    return obj["value"] if isinstance(obj, dict) and "value" in obj else obj


def compare_values(a: Any, b: Any) -> dict[str, Any]:
    """`equal` (None: neither is a tensor, not compared), `max_abs_diff`, shapes and dtypes; a
    tensor on one side only differs (`why` says what the other side dumped)."""
    import torch

    tensors = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
    if not any(tensors):
        return {"equal": None}
    if not all(tensors):
        return {"equal": False, "max_abs_diff": None,
                "why": f"a {type(a).__name__} on the base, a {type(b).__name__} on the candidate"}
    facts: dict[str, Any] = {"shape": list(a.shape), "dtype": str(a.dtype).removeprefix("torch.")}
    if a.shape != b.shape or a.dtype != b.dtype:
        return {**facts, "equal": False, "max_abs_diff": None,
                "why": f"shape {list(a.shape)} {facts['dtype']} vs {list(b.shape)} {str(b.dtype).removeprefix('torch.')}"}
    x, y = a.double(), b.double()
    both_nan = torch.isnan(x) & torch.isnan(y)
    same = (x == y) | both_nan
    equal = bool(same.all())
    diff = torch.where(same, torch.zeros_like(x), (x - y).abs())
    worst = float(diff.max()) if diff.numel() else 0.0
    return {**facts, "equal": equal, "max_abs_diff": None if math.isnan(worst) else worst,
            "differing": int((~same).sum())}


def _entry(tags: dict[str, str], path: Path) -> dict[str, Any]:
    return {"name": tags.get("name", path.stem), "step": int(tags.get("step", 0)),
            "layer_id": int(tags["layer_id"]) if "layer_id" in tags else None}


def compare_dirs(base: Path, cand: Path) -> dict[str, Any]:
    base_files, cand_files = ordered(base), ordered(cand)
    cand_by_key = {key: (tags, path) for key, tags, path in cand_files}
    base_keys = {key for key, _tags, _path in base_files}
    passes: dict[int, list[dict[str, Any]]] = {}  # forward pass -> its entries, in the base's order
    compared = not_tensors = 0
    first: dict[str, Any] | None = None
    for key, tags, path in base_files:
        entry = _entry(tags, path)
        entries = passes.setdefault(entry["step"], [])
        partner = cand_by_key.get(key)
        if partner is None:
            first = {**entry, "equal": False, "only": "base"}
            entries.append(first)
            break
        facts = compare_values(_value(path), _value(partner[1]))
        if facts["equal"] is None:
            not_tensors += 1
            continue
        compared += 1
        entries.append({**entry, **facts})
        if not facts["equal"]:
            first = entries[-1]
            break
    if first is None:  # every base file agreed: a file the candidate alone dumped still differs
        extra = next(((tags, p) for key, tags, p in cand_files if key not in base_keys), None)
        if extra is not None:
            first = {**_entry(*extra), "equal": False, "only": "candidate"}
            passes.setdefault(first["step"], []).append(first)
    # The deciding forward pass: the first difference's, else the last one compared.
    deciding = passes.get(first["step"], []) if first is not None else passes[max(passes)] if passes else []
    return {"base_files": len(base_files), "candidate_files": len(cand_files), "compared": compared,
            "not_tensors": not_tensors, "first": first, "entries": deciding[-MAX_ENTRIES:]}


if __name__ == "__main__":
    json.dump(compare_dirs(Path(sys.argv[1]), Path(sys.argv[2])), sys.stdout)
