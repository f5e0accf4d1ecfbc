"""Tiny checkpoints with seeded random weights at a realistic scale.

SGLang's `--load-format dummy` fills every weight with uniform ±1e-3, so logits are nearly
uniform and KL or accept-length signals vanish. This writes a real safetensors checkpoint for a
config.json instead: linear weights ~ N(0, 1/fan_in), embeddings ~ N(0, 1), the output head wider (logits of
std ~5), norms 1, biases 0,
each tensor from its own seed (name + seed), so the same config gives the same bytes anywhere.
Covers the Llama family (LlamaForCausalLM, Qwen2/Qwen3ForCausalLM), which the GPU runs use for
deterministic, speculative and KL checks.

torch is imported lazily: the harness itself never needs it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

LLAMA_FAMILY = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}
_DTYPES = {"bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4)}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    init: str  # "normal" (std 1/sqrt(fan_in)), "head", "embedding" (std 1), "ones", "zeros"


def llama_tensors(cfg: dict) -> list[TensorSpec]:
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim", h // heads)
    qk_norm = "Qwen3" in cfg["architectures"][0]
    bias = bool(cfg.get("attention_bias", "Qwen2" in cfg["architectures"][0]))
    out = [TensorSpec("model.embed_tokens.weight", (vocab, h), "embedding")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [
            TensorSpec(f"{p}.input_layernorm.weight", (h,), "ones"),
            TensorSpec(f"{p}.self_attn.q_proj.weight", (heads * hd, h), "normal"),
            TensorSpec(f"{p}.self_attn.k_proj.weight", (kv * hd, h), "normal"),
            TensorSpec(f"{p}.self_attn.v_proj.weight", (kv * hd, h), "normal"),
            TensorSpec(f"{p}.self_attn.o_proj.weight", (h, heads * hd), "normal"),
            TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), "ones"),
            TensorSpec(f"{p}.mlp.gate_proj.weight", (inter, h), "normal"),
            TensorSpec(f"{p}.mlp.up_proj.weight", (inter, h), "normal"),
            TensorSpec(f"{p}.mlp.down_proj.weight", (h, inter), "normal"),
        ]
        if bias:
            out += [TensorSpec(f"{p}.self_attn.{n}_proj.bias", (d,), "zeros")
                    for n, d in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd))]
        if qk_norm:
            out += [TensorSpec(f"{p}.self_attn.{n}_norm.weight", (hd,), "ones") for n in ("q", "k")]
    out.append(TensorSpec("model.norm.weight", (h,), "ones"))
    if not cfg.get("tie_word_embeddings", False):
        out.append(TensorSpec("lm_head.weight", (vocab, h), "head"))
    return out


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
        std = {"embedding": 1.0, "head": HEAD_STD / spec.shape[-1] ** 0.5}.get(
            spec.init, scale / spec.shape[-1] ** 0.5)
        t = torch.randn(spec.shape, generator=gen) * std
    return t.to(getattr(torch, dtype)).contiguous()


def write_safetensors(path: Path, tensors: dict[str, object], dtype: str) -> None:
    """The safetensors layout: u64 header size, JSON header of offsets, raw little-endian data."""
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


def make_model(config_dir: Path, out_dir: Path, seed: int = 0, scale: float = 1.0) -> Path:
    cfg_path = config_dir / "config.json"
    if not cfg_path.is_file():
        raise UsageError(f"{config_dir}: no config.json")
    cfg = json.loads(cfg_path.read_text())
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch not in LLAMA_FAMILY:
        raise UsageError(f"{cfg_path}: architecture {arch} is not supported by make-model "
                         f"(supported: {', '.join(sorted(LLAMA_FAMILY))}); use --load-format dummy")
    dtype = cfg.get("torch_dtype", "bfloat16")
    if dtype not in _DTYPES:
        raise UsageError(f"{cfg_path}: torch_dtype {dtype} not supported (use one of {', '.join(_DTYPES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in config_dir.iterdir():
        if item.suffix == ".json":
            shutil.copy2(item, out_dir / item.name)
    tensors = {s.name: _tensor(s, seed, dtype, scale) for s in llama_tensors(cfg)}
    target = out_dir / "model.safetensors"
    write_safetensors(target, tensors, dtype)
    return target
