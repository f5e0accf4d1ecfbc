"""Tiny checkpoints with seeded random weights at a realistic scale.

SGLang's `--load-format dummy` fills every weight with uniform ±1e-3, so logits are nearly
uniform and KL or accept-length signals vanish. This writes a real safetensors checkpoint for a
config.json instead (its tensors: harness/checkpoints/architectures.py): linear weights ~
N(0, 1/fan_in) (fan-in = the last dimension, also for conv kernels and Inkling's
relative-position projection, unless a TensorSpec names it), embeddings ~ N(0, 1), the output
head wider (logits of std ~5), norms 1 (0 where SGLang applies weight + 1), biases 0, each
tensor from its own seed (name + seed), so the same config gives the same bytes anywhere.

torch is imported lazily: the harness itself never needs it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

from harness.checkpoints.architectures import ARCHITECTURES, TensorSpec
from harness.errors import UsageError

WEIGHTS_FILE = "model.safetensors"
_DTYPES = {"bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4)}


# Logits of std ~5 over a 32k vocabulary: the top token gets a few percent to tens of percent,
# like a trained model's, instead of 1/V (std 1 would leave the distribution almost flat).
HEAD_STD = 5.0


def _tensor(spec: TensorSpec, seed: int, dtype: str, scale: float):
    import torch

    if spec.init == "ones":
        t = torch.ones(spec.shape)
    elif spec.init == "zeros":
        t = torch.zeros(spec.shape)
    else:
        digest = hashlib.sha256(f"{seed}:{spec.name}".encode()).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        fan_in = spec.fan_in or spec.shape[-1]
        std = {"embedding": 1.0, "head": HEAD_STD / fan_in ** 0.5}.get(spec.init, scale / fan_in ** 0.5)
        t = torch.randn(spec.shape, generator=gen) * std
    return t.to(getattr(torch, dtype)).contiguous()


def write_safetensors(path: Path, tensors: dict[str, Any], dtype: str) -> None:
    """The safetensors layout: u64 header size, JSON header of offsets, raw little-endian data
    (`tensors`: torch tensors by name; torch is imported here, so not in the annotation)."""
    import torch

    code, width = _DTYPES[dtype]
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        raw = t.view(torch.int16 if width == 2 else torch.int32).numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)


def make_model(config_dir: Path, out_dir: Path, seed: int = 0, scale: float = 1.0, force: bool = False) -> Path:
    """config_dir's JSON files and seeded weights (model.safetensors) written into out_dir; a
    file of those already there is replaced only with `force` (it may be a checkpoint of its own)."""
    cfg_path = config_dir / "config.json"
    if not cfg_path.is_file():
        raise UsageError(f"{config_dir}: no config.json")
    cfg = json.loads(cfg_path.read_text())
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch not in ARCHITECTURES:
        raise UsageError(f"{cfg_path}: architecture {arch} is not supported by make-model "
                         f"(supported: {', '.join(sorted(ARCHITECTURES))}); use --load-format dummy")
    dtype = cfg.get("torch_dtype", "bfloat16")
    if dtype not in _DTYPES:
        raise UsageError(f"{cfg_path}: torch_dtype {dtype} not supported (use one of {', '.join(_DTYPES)})")
    configs = sorted(item for item in config_dir.iterdir() if item.suffix == ".json")
    there = sorted(name for name in {*(item.name for item in configs), WEIGHTS_FILE} if (out_dir / name).exists())
    if there and not force:
        raise UsageError(f"--out {out_dir} holds {', '.join(there)}: pass --force to replace them")
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in configs:
        shutil.copy2(item, out_dir / item.name)
    tensors = {s.name: _tensor(s, seed, dtype, scale) for s in ARCHITECTURES[arch](cfg)}
    target = out_dir / WEIGHTS_FILE
    write_safetensors(target, tensors, dtype)
    return target
