"""Tiny checkpoints with seeded random weights at a realistic scale.

SGLang's `--load-format dummy` fills every weight with uniform ±1e-3, so logits are nearly
uniform and KL or accept-length signals vanish. This writes a real safetensors checkpoint for a
config.json instead: linear weights ~ N(0, 1/fan_in), embeddings ~ N(0, 1), the output head wider (logits of
std ~5), norms 1, biases 0,
each tensor from its own seed (name + seed), so the same config gives the same bytes anywhere.
Covers the Llama family (LlamaForCausalLM, Qwen2/Qwen3ForCausalLM), hybrid Qwen3-Next (GDN linear
attention + gated full attention, MoE with a shared expert; MTP layers are not written), and the
EAGLE (LlamaForCausalLMEagle) and EAGLE3 (LlamaForCausalLMEagle3) draft heads for a Llama target.
Tensor names and shapes follow the checkpoints SGLang's model files load (0.5.16/0.5.17).

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


@dataclass(frozen=True)
class AttentionDims:
    """The attention geometry of one layer: every projection's shape derives from it."""
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, cfg: dict) -> AttentionDims:
        heads = cfg["num_attention_heads"]
        return cls(cfg["hidden_size"], heads, cfg.get("num_key_value_heads", heads),
                   cfg.get("head_dim", cfg["hidden_size"] // heads))


def _llama_mlp(p: str, h: int, inter: int) -> list[TensorSpec]:
    return [TensorSpec(f"{p}.gate_proj.weight", (inter, h), "normal"),
            TensorSpec(f"{p}.up_proj.weight", (inter, h), "normal"),
            TensorSpec(f"{p}.down_proj.weight", (h, inter), "normal")]


def _llama_attn(p: str, h_in: int, h: int, heads: int, kv: int, hd: int) -> list[TensorSpec]:
    return [TensorSpec(f"{p}.q_proj.weight", (heads * hd, h_in), "normal"),
            TensorSpec(f"{p}.k_proj.weight", (kv * hd, h_in), "normal"),
            TensorSpec(f"{p}.v_proj.weight", (kv * hd, h_in), "normal"),
            TensorSpec(f"{p}.o_proj.weight", (h, heads * hd), "normal")]


def _llama_layer(p: str, dims: AttentionDims, inter: int, *, bias: bool, qk_norm: bool) -> list[TensorSpec]:
    """One pre-norm Llama / Qwen decoder layer under `p`, in the checkpoint's unstacked names
    (SGLang stacks q/k/v into qkv_proj and gate/up into gate_up_proj at load)."""
    h, hd = dims.hidden, dims.head_dim
    out = [TensorSpec(f"{p}.input_layernorm.weight", (h,), "ones"),
           *_llama_attn(f"{p}.self_attn", h, h, dims.heads, dims.kv_heads, hd),
           TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), "ones"),
           *_llama_mlp(f"{p}.mlp", h, inter)]
    if bias:
        out += [TensorSpec(f"{p}.self_attn.{n}_proj.bias", (d,), "zeros")
                for n, d in (("q", dims.heads * hd), ("k", dims.kv_heads * hd), ("v", dims.kv_heads * hd))]
    if qk_norm:
        out += [TensorSpec(f"{p}.self_attn.{n}_norm.weight", (hd,), "ones") for n in ("q", "k")]
    return out


def _lm_head(cfg: dict, name: str, vocab: int, h: int) -> list[TensorSpec]:
    """A separate output head, unless the config ties it to the embedding (SGLang then shares it)."""
    return [] if cfg.get("tie_word_embeddings", False) else [TensorSpec(name, (vocab, h), "head")]


def llama_tensors(cfg: dict) -> list[TensorSpec]:
    dims, vocab = AttentionDims.of(cfg), cfg["vocab_size"]
    qk_norm = "Qwen3" in cfg["architectures"][0]
    bias = bool(cfg.get("attention_bias", "Qwen2" in cfg["architectures"][0]))
    out = [TensorSpec("model.embed_tokens.weight", (vocab, dims.hidden), "embedding")]
    for i in range(cfg["num_hidden_layers"]):
        out += _llama_layer(f"model.layers.{i}", dims, cfg["intermediate_size"], bias=bias, qk_norm=qk_norm)
    out.append(TensorSpec("model.norm.weight", (dims.hidden,), "ones"))
    return out + _lm_head(cfg, "lm_head.weight", vocab, dims.hidden)


def qwen3_next_tensors(cfg: dict) -> list[TensorSpec]:
    """Qwen3NextForCausalLM: every `full_attention_interval`-th layer is gated full attention, the
    rest Gated DeltaNet; every layer's MLP is a sparse MoE block with a gated shared expert. Norms
    are Gemma-style (weight + 1), so they start at 0; the GDN output norm is plain (starts at 1)."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // heads)
    k_heads, v_heads = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    key_dim, value_dim = k_heads * cfg["linear_key_head_dim"], v_heads * cfg["linear_value_head_dim"]
    interval = cfg.get("full_attention_interval", 4)
    experts, moe_inter = cfg["num_experts"], cfg["moe_intermediate_size"]
    shared_inter = cfg.get("shared_expert_intermediate_size", 0)
    gate = 2 if cfg.get("attn_output_gate", True) else 1
    sparse_step = cfg.get("decoder_sparse_step", 1)
    mlp_only = set(cfg.get("mlp_only_layers", []))
    out = [TensorSpec("model.embed_tokens.weight", (vocab, h), "embedding")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [TensorSpec(f"{p}.input_layernorm.weight", (h,), "zeros"),
                TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), "zeros")]
        if (i + 1) % interval == 0:
            out += [
                TensorSpec(f"{p}.self_attn.q_proj.weight", (heads * hd * gate, h), "normal"),
                TensorSpec(f"{p}.self_attn.k_proj.weight", (kv * hd, h), "normal"),
                TensorSpec(f"{p}.self_attn.v_proj.weight", (kv * hd, h), "normal"),
                TensorSpec(f"{p}.self_attn.o_proj.weight", (h, heads * hd), "normal"),
                TensorSpec(f"{p}.self_attn.q_norm.weight", (hd,), "zeros"),
                TensorSpec(f"{p}.self_attn.k_norm.weight", (hd,), "zeros"),
            ]
        else:
            a = f"{p}.linear_attn"
            out += [
                # Packed (per-head-group) q, k, v, z and b, a: SGLang loads these as one tensor each.
                TensorSpec(f"{a}.in_proj_qkvz.weight", (2 * key_dim + 2 * value_dim, h), "normal"),
                TensorSpec(f"{a}.in_proj_ba.weight", (2 * v_heads, h), "normal"),
                TensorSpec(f"{a}.conv1d.weight", (2 * key_dim + value_dim, 1, cfg["linear_conv_kernel_dim"]),
                           "normal"),
                TensorSpec(f"{a}.dt_bias", (v_heads,), "ones"),
                TensorSpec(f"{a}.A_log", (v_heads,), "zeros"),  # decay rate exp(A_log) = 1
                TensorSpec(f"{a}.norm.weight", (cfg["linear_value_head_dim"],), "ones"),
                TensorSpec(f"{a}.out_proj.weight", (h, value_dim), "normal"),
            ]
        if i not in mlp_only and experts > 0 and (i + 1) % sparse_step == 0:
            out.append(TensorSpec(f"{p}.mlp.gate.weight", (experts, h), "normal"))
            for e in range(experts):
                out += _llama_mlp(f"{p}.mlp.experts.{e}", h, moe_inter)
            if shared_inter > 0:
                out += _llama_mlp(f"{p}.mlp.shared_expert", h, shared_inter)
                out.append(TensorSpec(f"{p}.mlp.shared_expert_gate.weight", (1, h), "normal"))
        else:
            out += _llama_mlp(f"{p}.mlp", h, cfg["intermediate_size"])
    out.append(TensorSpec("model.norm.weight", (h,), "zeros"))
    return out + _lm_head(cfg, "lm_head.weight", vocab, h)


def eagle_tensors(cfg: dict) -> list[TensorSpec]:
    """LlamaForCausalLMEagle (EAGLE-1/2 head): fc(concat(embedding, target hidden)) then Llama layers,
    the first without an input norm; names without the `model.` prefix. The embedding and the LM
    head come from the target at run time (an lm_head is written only if untied)."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim", h // heads)
    out = [TensorSpec("embed_tokens.weight", (cfg["vocab_size"], h), "embedding"),
           TensorSpec("fc.weight", (h, 2 * h), "normal"), TensorSpec("fc.bias", (h,), "zeros")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}"
        if i > 0:
            out.append(TensorSpec(f"{p}.input_layernorm.weight", (h,), "ones"))
        out += _llama_attn(f"{p}.self_attn", h, h, heads, kv, hd)
        out.append(TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), "ones"))
        out += _llama_mlp(f"{p}.mlp", h, inter)
    return out


def eagle3_tensors(cfg: dict) -> list[TensorSpec]:
    """LlamaForCausalLMEagle3: fc over 3 target hidden states, one `midlayer` whose attention reads
    concat(normed embedding, normed hidden) (2 × hidden wide), a final norm and a draft LM head."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim", h // heads)
    if cfg.get("num_hidden_layers", 1) != 1:
        raise UsageError("make-model writes EAGLE3 heads with one layer (num_hidden_layers = 1)")
    if cfg.get("fc_norm") or cfg.get("use_aux_norm") or cfg.get("bias"):
        raise UsageError("make-model writes EAGLE3 heads without fc_norm / use_aux_norm / bias")
    h_in = cfg.get("target_hidden_size", h)
    aux = cfg.get("num_aux_hidden_states") or len(
        (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    out = [TensorSpec("embed_tokens.weight", (cfg["vocab_size"], h), "embedding"),
           TensorSpec("fc.weight", (h, h_in * aux), "normal"),
           TensorSpec("midlayer.input_layernorm.weight", (h,), "ones"),
           TensorSpec("midlayer.hidden_norm.weight", (h,), "ones")]
    out += _llama_attn("midlayer.self_attn", 2 * h, h, heads, kv, hd)
    out.append(TensorSpec("midlayer.post_attention_layernorm.weight", (h,), "ones"))
    out += _llama_mlp("midlayer.mlp", h, inter)
    out.append(TensorSpec("norm.weight", (h,), "ones"))
    if not cfg.get("tie_word_embeddings", False):
        out.append(TensorSpec("lm_head.weight", (cfg.get("draft_vocab_size") or cfg["vocab_size"], h), "head"))
    return out


ARCHITECTURES = {
    **{a: llama_tensors for a in LLAMA_FAMILY},
    "Qwen3NextForCausalLM": qwen3_next_tensors,
    "LlamaForCausalLMEagle": eagle_tensors,
    "LlamaForCausalLMEagle3": eagle3_tensors,
}


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
    if arch not in ARCHITECTURES:
        raise UsageError(f"{cfg_path}: architecture {arch} is not supported by make-model "
                         f"(supported: {', '.join(sorted(ARCHITECTURES))}); use --load-format dummy")
    dtype = cfg.get("torch_dtype", "bfloat16")
    if dtype not in _DTYPES:
        raise UsageError(f"{cfg_path}: torch_dtype {dtype} not supported (use one of {', '.join(_DTYPES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in config_dir.iterdir():
        if item.suffix == ".json":
            shutil.copy2(item, out_dir / item.name)
    tensors = {s.name: _tensor(s, seed, dtype, scale) for s in ARCHITECTURES[arch](cfg)}
    target = out_dir / "model.safetensors"
    write_safetensors(target, tensors, dtype)
    return target
