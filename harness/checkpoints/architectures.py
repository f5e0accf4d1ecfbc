"""The architecture catalogue: each supported checkpoint class's tensors (names, shapes, how
each is initialised), from its config.json. harness/checkpoints/weights.py fills them.

Tensor names and shapes are the checkpoint's (before SGLang stacks q/k/v or gate/up), read off
each class's __init__ and load_weights in SGLang 0.5.16 and 0.5.17 (identical for these). An
output head is written only when tie_word_embeddings is false; a draft that SGLang gives the
target's embedding / head holds none:

- Llama family (LlamaForCausalLM, Qwen2/Qwen3ForCausalLM, Mistral): models/llama.py, qwen3.py.
- Qwen3NextForCausalLM: GDN linear attention + gated full attention, MoE with a shared expert;
  Gemma-style norms (start at 0); MTP layers are not written.
- LlamaForCausalLMEagle / LlamaForCausalLMEagle3: EAGLE / EAGLE3 draft heads for a Llama target.
- GptOssForCausalLM (models/gpt_oss.py), bf16: Hugging Face names, fused expert tensors.
- DFlashDraftModel (models/dflash.py) and Qwen3DSparkModel (models/dspark.py: the DFLASH backbone
  plus a Markov head and a confidence head): drafts without embedding or LM head.
- InklingForConditionalGeneration (models/inkling.py), text only, dense MLPs: the trunk under
  `model.llm.` and the MTP heads under `model.mtp.layers.N.`, which multi-layer EAGLE loads from
  the same directory (InklingForConditionalGenerationMTP). Plain RMSNorms (start at 1);
  short-convolution kernels ~ N(0, 1/kernel) on top of SGLang's residual path.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import UsageError

LLAMA_FAMILY = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    init: str  # "normal" (std 1/sqrt(fan_in)), "head", "embedding" (std 1), "ones", "zeros"
    # The input width of a "normal" tensor when it is not the last dimension (gpt-oss stores its
    # experts as (experts, in, out)).
    fan_in: int | None = None


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
    out = [TensorSpec("embed_tokens.weight", (cfg["vocab_size"], h), "embedding"),
           TensorSpec("fc.weight", (h, h_in * eagle3_fc_states(cfg)), "normal"),
           TensorSpec("midlayer.input_layernorm.weight", (h,), "ones"),
           TensorSpec("midlayer.hidden_norm.weight", (h,), "ones")]
    out += _llama_attn("midlayer.self_attn", 2 * h, h, heads, kv, hd)
    out.append(TensorSpec("midlayer.post_attention_layernorm.weight", (h,), "ones"))
    out += _llama_mlp("midlayer.mlp", h, inter)
    out.append(TensorSpec("norm.weight", (h,), "ones"))
    if not cfg.get("tie_word_embeddings", False):
        out.append(TensorSpec("lm_head.weight", (cfg.get("draft_vocab_size") or cfg["vocab_size"], h), "head"))
    return out


def eagle3_aux_states(target: dict, draft: dict) -> tuple[int, int]:
    """(hidden states an EAGLE3 draft gets from its target, hidden states its fc expects), as
    SGLang 0.5.16–0.5.17 decide them. The target's `set_eagle3_layers_to_capture` keeps the
    input of layer id + 1 for each of the draft's `eagle_config.eagle_aux_hidden_state_layer_ids`,
    or, without them, of layers [2, n // 2, n - 3]; a layer is captured once, and only if it
    exists, so a 2-layer target hands over one state where the draft's fc reads three. The fc is
    sized by `num_aux_hidden_states`, else by the number of layer ids, else 3. With CUDA graphs
    the buffers have the fc's width (the launch dies on the mismatch); without them a single
    state as wide as the embedding skips the fc, so the auxiliary path is never run."""
    n = target["num_hidden_layers"]
    ids = _eagle3_layer_ids(draft)
    wanted = [i + 1 for i in ids] if ids else [2, n // 2, n - 3]
    captured = len({i for i in wanted if 0 <= i < n})
    return captured, eagle3_fc_states(draft)


def _eagle3_layer_ids(draft: dict) -> list[int] | None:
    return (draft.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")


def eagle3_fc_states(draft: dict) -> int:
    """How many target hidden states an EAGLE3 draft's fc reads (its input is that many times
    the target's width): `num_aux_hidden_states`, else the number of layer ids, else 3."""
    return draft.get("num_aux_hidden_states") or len(_eagle3_layer_ids(draft) or [0, 0, 0])


def gpt_oss_tensors(cfg: dict) -> list[TensorSpec]:
    """GptOssForCausalLM, bf16 (models/gpt_oss.py, _load_normal_weights), in the Hugging Face
    layout SGLang loads: q/k/v/o with biases (stacked into qkv_proj), per-head attention `sinks`
    (logit 0: a sink as likely as one key), a biased `router`, and every layer's experts as
    fused tensors `experts.gate_up_proj` (experts, hidden, 2 * intermediate) and
    `experts.down_proj` (experts, intermediate, hidden), stored input-major (SGLang transposes
    them into w13 / w2) with their biases. Sliding-window and full layers have the same tensors."""
    dims, vocab = AttentionDims.of(cfg), cfg["vocab_size"]
    h, hd, inter, experts = dims.hidden, dims.head_dim, cfg["intermediate_size"], cfg["num_local_experts"]
    if not cfg.get("attention_bias", True) or cfg.get("quantization_config"):
        raise UsageError("make-model writes gpt-oss in bf16 with attention biases")
    out = [TensorSpec("model.embed_tokens.weight", (vocab, h), "embedding")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [TensorSpec(f"{p}.input_layernorm.weight", (h,), "ones"),
                *_llama_attn(f"{p}.self_attn", h, h, dims.heads, dims.kv_heads, hd),
                *[TensorSpec(f"{p}.self_attn.{n}_proj.bias", (d,), "zeros")
                  for n, d in (("q", dims.heads * hd), ("k", dims.kv_heads * hd), ("v", dims.kv_heads * hd), ("o", h))],
                TensorSpec(f"{p}.self_attn.sinks", (dims.heads,), "zeros"),
                TensorSpec(f"{p}.post_attention_layernorm.weight", (h,), "ones"),
                TensorSpec(f"{p}.mlp.router.weight", (experts, h), "normal"),
                TensorSpec(f"{p}.mlp.router.bias", (experts,), "zeros"),
                TensorSpec(f"{p}.mlp.experts.gate_up_proj", (experts, h, 2 * inter), "normal", fan_in=h),
                TensorSpec(f"{p}.mlp.experts.gate_up_proj_bias", (experts, 2 * inter), "zeros"),
                TensorSpec(f"{p}.mlp.experts.down_proj", (experts, inter, h), "normal", fan_in=inter),
                TensorSpec(f"{p}.mlp.experts.down_proj_bias", (experts, h), "zeros")]
    out.append(TensorSpec("model.norm.weight", (h,), "ones"))
    return out + _lm_head(cfg, "lm_head.weight", vocab, h)


def dflash_tensors(cfg: dict) -> list[TensorSpec]:
    """DFlashDraftModel (sglang/srt/models/dflash.py): Qwen3 layers (q/k norms) whose input is
    the target's embedding, `fc` over the concatenated hidden states of the target layers in
    dflash_config.target_layer_ids (K of them; the draft's layer count when absent), then
    `hidden_norm` and a final `norm`. Names carry no `model.` prefix (load_weights accepts both).
    No embedding and no LM head: the draft uses the target's."""
    dims = AttentionDims.of(cfg)
    if cfg.get("attention_bias"):
        raise UsageError("make-model writes DFLASH / DSPARK drafts without attention_bias")
    target_layers = (cfg.get("dflash_config") or {}).get("target_layer_ids")
    context_features = len(target_layers) if target_layers else cfg["num_hidden_layers"]
    out: list[TensorSpec] = []
    for i in range(cfg["num_hidden_layers"]):
        out += _llama_layer(f"layers.{i}", dims, cfg["intermediate_size"], bias=False, qk_norm=True)
    return out + [TensorSpec("norm.weight", (dims.hidden,), "ones"),
                  TensorSpec("fc.weight", (dims.hidden, context_features * dims.hidden), "normal"),
                  TensorSpec("hidden_norm.weight", (dims.hidden,), "ones")]


def dspark_tensors(cfg: dict) -> list[TensorSpec]:
    """Qwen3DSparkModel (sglang/srt/models/dspark.py): the DFLASH backbone plus a Markov head that
    adds a bias from the previous token to each block position's logits (`markov_w1`: token ->
    rank-r embedding, `markov_w2`: r -> vocabulary; the gated / rnn heads add their gate), and a
    confidence head (`proj` over hidden ⊕ Markov embedding). SGLang builds the confidence head
    unless SGLANG_RAGGED_VERIFY_MODE is "static" (the default, which skips these names) and then
    requires it, so it is always written. The logits come from the target's LM head."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    rank = int(cfg.get("markov_rank", 0))
    if rank <= 0:
        raise UsageError("DSPARK drafts need markov_rank > 0 (SGLang refuses them otherwise)")
    head_type = str(cfg.get("markov_head_type", "vanilla")).lower()
    # Extra Linear (with bias) per head type: (name, input width, output width).
    gates = {"vanilla": [], "gated": [("gate_proj", h + rank, rank)], "rnn": [("joint_proj", 2 * rank + h, 3 * rank)]}
    if head_type not in gates:
        raise UsageError(f"DSPARK markov_head_type {head_type!r}: make-model writes {', '.join(gates)}")
    out = dflash_tensors(cfg)
    # markov_w1 is an embedding (std 1); markov_w2 as a linear over r gives a bias of std ~1
    # next to the target head's logits of std ~HEAD_STD: a correction, not the whole answer.
    out += [TensorSpec("markov_head.markov_w1.weight", (vocab, rank), "embedding"),
            TensorSpec("markov_head.markov_w2.weight", (vocab, rank), "normal")]
    for name, fan_in, width in gates[head_type]:
        out += [TensorSpec(f"markov_head.{name}.weight", (width, fan_in), "normal"),
                TensorSpec(f"markov_head.{name}.bias", (width,), "zeros")]
    with_markov = cfg.get("confidence_head_with_markov", True)
    out += [TensorSpec("confidence_head.proj.weight", (1, h + (rank if with_markov else 0)), "normal"),
            TensorSpec("confidence_head.proj.bias", (1,), "zeros")]
    return out


@dataclass(frozen=True)
class InklingBlock:
    """What one Inkling decoder block's tensors depend on (InklingDecoderLayer.__init__)."""
    dims: AttentionDims
    d_rel: int
    rel_extent: int  # relative-logit positions: the window on a local layer, rel_extent on a global one
    dense_inter: int
    sconv_kernel: int | None  # None: no short convolutions (use_sconv false)


def _inkling_block(p: str, b: InklingBlock) -> list[TensorSpec]:
    """One block in the checkpoint's own names: attn.{wq_du,wk_dv,wv_dv,wr_du} (SGLang stacks
    them into attn.qkvr, shards 0-3), attn.wo_ud, the relative-position projection, per-head q/k
    norms, the dense MLP as one interleaved gate/up tensor `mlp.w13_dn` (SGLang's native
    layout for gate_up_proj) and `mlp.w2_md`, and with use_sconv the depthwise short
    convolutions on k, v and on the attention and MLP outputs (each with a residual in SGLang,
    so a random kernel perturbs the stream rather than replacing it)."""
    d = b.dims
    h, q, kv = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    out = [TensorSpec(f"{p}.attn_norm.weight", (h,), "ones"),
           TensorSpec(f"{p}.attn.wq_du.weight", (q, h), "normal"),
           TensorSpec(f"{p}.attn.wk_dv.weight", (kv, h), "normal"),
           TensorSpec(f"{p}.attn.wv_dv.weight", (kv, h), "normal"),
           TensorSpec(f"{p}.attn.wr_du.weight", (b.d_rel * d.heads, h), "normal"),
           TensorSpec(f"{p}.attn.wo_ud.weight", (h, q), "normal"),
           # (d_rel, extent), applied as r @ proj: std 1/sqrt(extent) by the last-dimension
           # convention, so the bias each position gets has std ~sqrt(d_rel / extent) < 1.
           TensorSpec(f"{p}.attn.rel_logits_proj.proj", (b.d_rel, b.rel_extent), "normal"),
           TensorSpec(f"{p}.attn.q_norm.weight", (d.head_dim,), "ones"),
           TensorSpec(f"{p}.attn.k_norm.weight", (d.head_dim,), "ones"),
           TensorSpec(f"{p}.mlp_norm.weight", (h,), "ones"),
           TensorSpec(f"{p}.mlp.w13_dn.weight", (2 * b.dense_inter, h), "normal"),
           TensorSpec(f"{p}.mlp.w2_md.weight", (h, b.dense_inter), "normal")]
    if b.sconv_kernel is not None:
        k = b.sconv_kernel
        out += [TensorSpec(f"{p}.attn.k_sconv.weight", (kv, 1, k), "normal"),
                TensorSpec(f"{p}.attn.v_sconv.weight", (kv, 1, k), "normal"),
                TensorSpec(f"{p}.attn_sconv.weight", (h, 1, k), "normal"),
                TensorSpec(f"{p}.mlp_sconv.weight", (h, 1, k), "normal")]
    return out


def inkling_tensors(cfg: dict) -> list[TensorSpec]:
    """InklingForConditionalGeneration, text only (sglang/srt/models/inkling.py, defaults from
    configs/inkling.py): `model.llm.*` for the trunk (local_layer_ids are sliding-window layers
    with the swa_* geometry, the rest global) and `model.mtp.layers.N.*` for the
    num_nextn_predict_layers MTP heads (hidden_norm, embed_norm, input_proj over
    concat(normed hidden, normed embedding), one dense block `transformer_block`, global unless
    listed in mtp_config.local_layer_ids). With --enable-multi-layer-eagle SGLang loads head N
    from the same checkpoint by keeping `model.mtp.layers.N.` (renamed to layer 0); each head
    also loads `model.llm.embed_tokens` and `model.llm.lm_head` and fails on any parameter it
    did not load. Norms are plain RMSNorm (x * w): they start at 1. Only dense MLPs: every
    layer below dense_mlp_idx (MoE layers are not written). With tie_word_embeddings no
    `model.llm.lm_head` is written: the trunk then copies its embedding, but an MTP head would
    refuse to load (its lm_head is a parameter of its own)."""
    t = cfg["text_config"]
    h, vocab = t["hidden_size"], t.get("padded_vocab_size", t["vocab_size"])
    n_layers = t["num_hidden_layers"]
    if t.get("dense_mlp_idx", 0) < n_layers:
        raise UsageError("make-model writes Inkling with dense MLPs only (dense_mlp_idx >= num_hidden_layers)")
    if t.get("q_bias") or t.get("o_bias") or t.get("use_global_scale"):
        raise UsageError("make-model writes Inkling without q_bias / o_bias / use_global_scale")
    full = AttentionDims.of(t)
    swa = AttentionDims(h, t.get("swa_num_attention_heads", full.heads),
                        t.get("swa_num_key_value_heads", full.kv_heads), t.get("swa_head_dim", full.head_dim))
    window, rel_extent, d_rel = t.get("sliding_window_size", 512), t.get("rel_extent", 1024), t.get("d_rel", 16)
    sconv = t.get("sconv_kernel_size", 4) if t.get("use_sconv") else None
    inter = t.get("dense_intermediate_size") or t["intermediate_size"]

    def block(local: bool, dims: AttentionDims, extent: int) -> InklingBlock:
        return InklingBlock(dims if local else full, d_rel, extent if local else rel_extent, inter, sconv)

    local_ids = set(t.get("local_layer_ids") or [])
    out = [TensorSpec("model.llm.embed_tokens.weight", (vocab, h), "embedding")]
    if t.get("use_embed_norm"):
        out.append(TensorSpec("model.llm.embed_norm.weight", (h,), "ones"))
    for i in range(n_layers):
        out += _inkling_block(f"model.llm.layers.{i}", block(i in local_ids, swa, window))
    out.append(TensorSpec("model.llm.norm.weight", (h,), "ones"))
    out += _lm_head(t, "model.llm.lm_head.weight", vocab, h)

    mtp = cfg.get("mtp_config") or {}
    # configs/inkling.py: mtp_config.local_layer_ids overrides text_config's; the banded heads'
    # kv geometry must equal the trunk's sliding-window one (asserted there).
    mtp_local = set(mtp.get("local_layer_ids") or t.get("mtp_local_layer_ids") or [])
    mtp_swa = AttentionDims(h, t.get("mtp_swa_num_attention_heads", swa.heads), swa.kv_heads, swa.head_dim)
    mtp_window = mtp.get("local_extent") or t.get("mtp_local_extent") or window
    for n in range(t.get("num_nextn_predict_layers", 8)):
        p = f"model.mtp.layers.{n}"
        out += [TensorSpec(f"{p}.hidden_norm.weight", (h,), "ones"),
                TensorSpec(f"{p}.embed_norm.weight", (h,), "ones"),
                TensorSpec(f"{p}.input_proj.weight", (h, 2 * h), "normal"),
                *_inkling_block(f"{p}.transformer_block", block(n in mtp_local, mtp_swa, mtp_window))]
    if mtp.get("chain_hidden_post_norm", t.get("chain_hidden_post_norm")):
        out.append(TensorSpec("model.mtp.chain_norm.weight", (h,), "ones"))
    return out


ARCHITECTURES = {
    **{a: llama_tensors for a in LLAMA_FAMILY},
    "Qwen3NextForCausalLM": qwen3_next_tensors,
    "LlamaForCausalLMEagle": eagle_tensors,
    "LlamaForCausalLMEagle3": eagle3_tensors,
    "GptOssForCausalLM": gpt_oss_tensors,
    "DFlashDraftModel": dflash_tensors,
    "Qwen3DSparkModel": dspark_tensors,
    "InklingForConditionalGeneration": inkling_tensors,
}
