"""make-model: a real safetensors file, seeded, at the intended scale."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.checkpoints.architectures import eagle3_aux_states
from harness.checkpoints.weights import make_model

safetensors_torch = pytest.importorskip("safetensors.torch")
ROOT = Path(__file__).resolve().parents[1]


def test_llama_checkpoint_round_trips(tmp_path):
    path = make_model(ROOT / "fixtures/models/tiny-llama", tmp_path / "m", seed=3)
    tensors = safetensors_torch.load_file(str(path))
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert tensors["model.embed_tokens.weight"].shape == (cfg["vocab_size"], cfg["hidden_size"])
    assert len(tensors) == 2 + 9 * cfg["num_hidden_layers"] + 1
    down = tensors["model.layers.1.mlp.down_proj.weight"].float()
    assert abs(down.std().item() - cfg["intermediate_size"] ** -0.5) < 0.003
    assert bool((tensors["model.norm.weight"] == 1).all())


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = make_model(ROOT / "fixtures/models/tiny-llama", tmp_path / "a", seed=1).read_bytes()
    b = make_model(ROOT / "fixtures/models/tiny-llama", tmp_path / "b", seed=1).read_bytes()
    c = make_model(ROOT / "fixtures/models/tiny-llama", tmp_path / "c", seed=2).read_bytes()
    assert a == b and a != c


def test_unsupported_architecture_is_a_usage_error_naming_the_supported_ones(tmp_path, capsys):
    from harness.cli import main

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg/config.json").write_text(json.dumps({"architectures": ["NoSuchForCausalLM"]}))
    assert main(["make-model", str(tmp_path / "cfg"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "NoSuchForCausalLM is not supported" in err
    for arch in ("InklingForConditionalGeneration", "Qwen3DSparkModel", "DFlashDraftModel", "LlamaForCausalLM"):
        assert arch in err
    assert not (tmp_path / "x").exists()


def test_qwen3_next_checkpoint_shapes(tmp_path):
    path = make_model(ROOT / "fixtures/models/tiny-qwen3next", tmp_path / "q", seed=0)
    t = safetensors_torch.load_file(str(path))
    cfg = json.loads((ROOT / "fixtures/models/tiny-qwen3next/config.json").read_text())
    h, key_dim = cfg["hidden_size"], cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    value_dim = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    # Layers 0-2 are Gated DeltaNet, layer 3 (full_attention_interval 4) gated full attention.
    assert t["model.layers.0.linear_attn.in_proj_qkvz.weight"].shape == (2 * key_dim + 2 * value_dim, h)
    assert t["model.layers.0.linear_attn.conv1d.weight"].shape == (2 * key_dim + value_dim, 1, 4)
    assert t["model.layers.2.linear_attn.in_proj_ba.weight"].shape == (2 * cfg["linear_num_value_heads"], h)
    assert "model.layers.3.linear_attn.A_log" not in t
    assert t["model.layers.3.self_attn.q_proj.weight"].shape == (2 * 8 * 64, h)  # query + output gate
    assert t["model.layers.1.mlp.experts.7.down_proj.weight"].shape == (h, cfg["moe_intermediate_size"])
    assert t["model.layers.1.mlp.shared_expert_gate.weight"].shape == (1, h)
    assert bool((t["model.norm.weight"] == 0).all())  # Gemma-style norm: weight + 1


def test_eagle_heads(tmp_path):
    t = safetensors_torch.load_file(str(make_model(ROOT / "fixtures/models/tiny-llama-eagle", tmp_path / "e")))
    assert t["fc.weight"].shape == (256, 512) and "layers.0.input_layernorm.weight" not in t
    assert "lm_head.weight" not in t and "model.norm.weight" not in t
    t3 = safetensors_torch.load_file(str(make_model(ROOT / "fixtures/models/tiny-llama-4l-eagle3", tmp_path / "e3")))
    assert t3["fc.weight"].shape == (256, 768)
    assert t3["midlayer.self_attn.q_proj.weight"].shape == (256, 512)
    assert t3["lm_head.weight"].shape == (32000, 256)


def config(name: str) -> dict:
    return json.loads((ROOT / "fixtures/models" / name / "config.json").read_text())


def test_eagle3_aux_states_follow_sglangs_layer_rule():
    draft = {k: v for k, v in config("tiny-llama-4l-eagle3").items() if k != "eagle_config"}
    # SGLang's default layers [2, n // 2, n - 3]: one state from a 2-layer target (layer 1), two
    # from a 4-layer one (layers 2, 2, 1), three from seven layers on.
    assert eagle3_aux_states({"num_hidden_layers": 2}, draft) == (1, 3)
    assert eagle3_aux_states({"num_hidden_layers": 4}, draft) == (2, 3)
    assert eagle3_aux_states({"num_hidden_layers": 7}, draft) == (3, 3)
    # The draft's own layer ids: the input of layer id + 1, only where that layer exists.
    assert eagle3_aux_states(config("tiny-llama-4l"), config("tiny-llama-4l-eagle3")) == (3, 3)
    assert eagle3_aux_states(config("tiny-llama"), config("tiny-llama-4l-eagle3")) == (1, 3)


def test_every_eagle3_pair_of_the_suites_hands_the_draft_the_states_it_expects():
    """The EAGLE3 rows with graphs on died at boot (768 vs 256) and the graphs-off ones never ran
    the draft's fc: the 2-layer target captured one hidden state for a draft that reads three."""
    pairs = []
    for path in sorted((ROOT / "suites").rglob("*.toml")):
        suite = tomllib.loads(path.read_text())
        for spec in suite.get("config", []):
            if (spec.get("speculative") or {}).get("algorithm") != "EAGLE3" or "sglang" not in spec.get("draft", {}):
                continue
            # .models/X (seeded by `detcheck make-model fixtures/models/X`) has X's config.json.
            target, draft = (config(Path(p).name) for p in (
                spec.get("model", {}).get("sglang") or suite["models"]["sglang"], spec["draft"]["sglang"]))
            pairs.append((path.name, spec["name"], *eagle3_aux_states(target, draft)))
    assert len(pairs) >= 3, pairs
    assert [p for p in pairs if p[2] != p[3]] == []


# --- Families checked against SGLang's loaders --------------------------------------------------
# Each table below was written by hand from the SGLang 0.5.16 wheel (sglang/srt/...), not from
# harness/checkpoints/architectures.py: the names are what the class's load_weights maps onto a parameter, the
# shapes the parameter's checkpoint shape for the fixture config (before any stacking). 0.5.17
# has the same __init__ / load_weights for these classes (diffed).


def _specs(model: str) -> dict[str, tuple[int, ...]]:
    from harness.checkpoints.architectures import ARCHITECTURES

    cfg = json.loads((ROOT / "fixtures/models" / model / "config.json").read_text())
    specs = ARCHITECTURES[cfg["architectures"][0]](cfg)
    assert len({s.name for s in specs}) == len(specs), "a tensor name is written twice"
    return {s.name: s.shape for s in specs}


# tiny-inkling: hidden 256, 4 heads / 2 kv heads of 64, d_rel 16, window = rel_extent = 128,
# dense MLP 512 on every layer (dense_mlp_idx 4), sconv kernel 4; swa_* default to the full
# geometry (configs/inkling.py InklingModelConfig.__init__), so local and global blocks have the
# same shapes here.
INKLING_BLOCK = {
    # models/inkling.py InklingDecoderLayer.__init__: attn_norm / mlp_norm RMSNorm(hidden).
    "attn_norm.weight": (256,), "mlp_norm.weight": (256,),
    # inkling_common/attn.py InklingAttention.__init__: qkvr = Merged(q 4*64, k 2*64, v 2*64,
    # r d_rel*heads = 16*4); InklingForConditionalGeneration.load_weights maps the checkpoint's
    # wq_du / wk_dv / wv_dv / wr_du onto shards 0-3 (ATTENTION_PARAMS_MAPPING).
    "attn.wq_du.weight": (256, 256), "attn.wk_dv.weight": (128, 256),
    "attn.wv_dv.weight": (128, 256), "attn.wr_du.weight": (64, 256),
    "attn.wo_ud.weight": (256, 256),  # RowParallelLinear(heads*head_dim -> hidden), o_bias false
    "attn.rel_logits_proj.proj": (16, 128),  # RelLogitsProj: Parameter(d_rel, rel_extent)
    "attn.q_norm.weight": (64,), "attn.k_norm.weight": (64,),  # RMSNorm(head_dim)
    # inkling_common/sconv.py ShortConvolution: Parameter(channels, 1, kernel); k/v over
    # kv_heads*head_dim, attn_sconv / mlp_sconv (InklingDecoderLayer) over hidden.
    "attn.k_sconv.weight": (128, 1, 4), "attn.v_sconv.weight": (128, 1, 4),
    "attn_sconv.weight": (256, 1, 4), "mlp_sconv.weight": (256, 1, 4),
    # inkling_common/dense_mlp.py InklingDenseMLP (LlamaMLP): gate_up_proj (2*512, 256) loaded
    # whole from `mlp.w13_dn` (load_weights, interleaved rows = its fused layout), down_proj from
    # `mlp.w2_md`.
    "mlp.w13_dn.weight": (1024, 256), "mlp.w2_md.weight": (256, 512),
}
# models/inkling.py InklingMTPLayer.__init__: hidden_norm, embed_norm, input_proj Linear(2h -> h).
# The loader's _filter_mtp_weights (model_loader/loader.py, pattern `model\.mtp\.layers\.(\d+)\.`)
# keeps head N and InklingForConditionalGenerationMTP.load_weights renames it to `model.`.
INKLING_MTP = {"hidden_norm.weight": (256,), "embed_norm.weight": (256,), "input_proj.weight": (256, 512)}
# InklingCausalLLM.__init__ (prefix llm; load_weights strips the checkpoint's `model.`); the MTP
# head loads these two as model.embed_tokens / lm_head (names llm.embed_tokens / llm.lm_head).
INKLING_TOP = {"model.llm.embed_tokens.weight": (32000, 256), "model.llm.norm.weight": (256,),
               "model.llm.lm_head.weight": (32000, 256)}


def test_inkling_tensors_match_sglang_loader_table():
    expected = dict(INKLING_TOP)
    for i in range(4):
        expected.update({f"model.llm.layers.{i}.{k}": v for k, v in INKLING_BLOCK.items()})
    for n in range(2):
        p = f"model.mtp.layers.{n}"
        expected.update({f"{p}.{k}": v for k, v in INKLING_MTP.items()})
        expected.update({f"{p}.transformer_block.{k}": v for k, v in INKLING_BLOCK.items()})
    got = _specs("tiny-inkling")
    assert got == expected
    assert len(got) == 3 + 4 * 16 + 2 * (3 + 16) == 105


def test_inkling_mtp_heads_load_from_the_same_checkpoint():
    """Replays the renaming multi-layer EAGLE applies for head 1 (loader._filter_mtp_weights, then
    InklingForConditionalGenerationMTP.load_weights): every MTP parameter must be hit."""
    import re

    names = list(_specs("tiny-inkling"))
    kept = [n.replace("model.mtp.layers.1.", "model.mtp.layers.0.") for n in names
            if not re.match(r"model\.mtp\.layers\.(\d+)\.", n) or n.startswith("model.mtp.layers.1.")]
    loaded = set()
    for name in kept:
        name = name.removeprefix("model.")
        name = re.sub(r".*mtp\.(?:model\.)?layers\.\d+\.", "model.", name)
        name = {"llm.embed_tokens.weight": "model.embed_tokens.weight",
                "llm.lm_head.weight": "lm_head.weight"}.get(name, name)
        if not name.startswith("llm."):
            loaded.add(name)
    block = {f"model.transformer_block.{k}" for k in INKLING_BLOCK}
    assert loaded == {"model.embed_tokens.weight", "lm_head.weight", *block,
                      *(f"model.{k}" for k in INKLING_MTP)}


# models/dflash.py DFlashDecoderLayer / DFlashAttention / DFlashMLP: Qwen3 layer, q/k/v and gate/up
# stacked by DFlashDraftModel.load_weights (stacked_params_mapping); names resolved with or
# without `model.`. DFlashDraftModel.__init__: norm, hidden_norm RMSNorm(hidden), fc
# Linear(K*hidden -> hidden, no bias), K = len(dflash_config.target_layer_ids) = 2. No
# embed_tokens / lm_head parameters.
def _dflash_expected(h: int, heads: int, kv: int, hd: int, inter: int) -> dict[str, tuple[int, ...]]:
    layer = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
             "self_attn.q_proj.weight": (heads * hd, h), "self_attn.k_proj.weight": (kv * hd, h),
             "self_attn.v_proj.weight": (kv * hd, h), "self_attn.o_proj.weight": (h, heads * hd),
             "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
             "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h),
             "mlp.down_proj.weight": (h, inter)}
    return {**{f"layers.0.{k}": v for k, v in layer.items()},
            "norm.weight": (h,), "hidden_norm.weight": (h,), "fc.weight": (h, 2 * h)}


def test_dflash_tensors_match_sglang_loader_table():
    assert _specs("tiny-llama-4l-dflash") == _dflash_expected(256, 4, 4, 64, 512)
    assert _specs("tiny-gptoss-dflash") == _dflash_expected(512, 8, 2, 64, 1024)
    assert len(_specs("tiny-llama-4l-dflash")) == 14


def test_dspark_tensors_match_sglang_loader_table():
    # models/dspark.py DSparkDraftMixin.load_weights: `markov_head.*` must be a parameter (else
    # ValueError); VanillaMarkov: markov_w1 Embedding(vocab, rank 16), markov_w2 Linear(16 -> vocab).
    # DSparkConfidenceHead: proj Linear(hidden + rank -> 1, bias); required when built (any
    # SGLANG_RAGGED_VERIFY_MODE but "static"), skipped otherwise. embed_tokens. / lm_head. skipped.
    expected = {**_dflash_expected(256, 4, 4, 64, 512),
                "markov_head.markov_w1.weight": (32000, 16), "markov_head.markov_w2.weight": (32000, 16),
                "confidence_head.proj.weight": (1, 256 + 16), "confidence_head.proj.bias": (1,)}
    assert _specs("tiny-llama-4l-dspark") == expected
    assert len(expected) == 18


@pytest.mark.parametrize("model", ["tiny-inkling", "tiny-llama-4l-dspark", "tiny-llama-4l-dflash"])
def test_new_families_write_the_same_bytes_for_the_same_seed(tmp_path, model):
    a = make_model(ROOT / "fixtures/models" / model, tmp_path / "a", seed=5)
    b = make_model(ROOT / "fixtures/models" / model, tmp_path / "b", seed=5)
    assert a.read_bytes() == b.read_bytes()
    tensors = safetensors_torch.load_file(str(a))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == _specs(model)


def test_inkling_norms_start_at_one_and_untied_head_is_separate(tmp_path):
    t = safetensors_torch.load_file(str(make_model(ROOT / "fixtures/models/tiny-inkling", tmp_path / "i")))
    assert bool((t["model.llm.layers.0.attn_norm.weight"] == 1).all())
    assert bool((t["model.mtp.layers.1.hidden_norm.weight"] == 1).all())
    assert not bool((t["model.llm.lm_head.weight"] == t["model.llm.embed_tokens.weight"]).all())


def test_dspark_other_markov_heads(tmp_path):
    cfg = json.loads((ROOT / "fixtures/models/tiny-llama-4l-dspark/config.json").read_text())
    from harness.checkpoints.architectures import dspark_tensors

    # dspark.py GatedMarkovHead: gate_proj Linear(hidden + rank -> rank); RNNHead: joint_proj
    # Linear(2 * rank + hidden -> 3 * rank), both with bias.
    gated = {s.name: s.shape for s in dspark_tensors({**cfg, "markov_head_type": "gated"})}
    assert gated["markov_head.gate_proj.weight"] == (16, 272) and gated["markov_head.gate_proj.bias"] == (16,)
    rnn = {s.name: s.shape for s in dspark_tensors({**cfg, "markov_head_type": "RNN"})}
    assert rnn["markov_head.joint_proj.weight"] == (48, 288)
    with pytest.raises(UsageError, match="markov_head_type 'tree'"):
        dspark_tensors({**cfg, "markov_head_type": "tree"})


def test_gpt_oss_tensors_match_sglang_loader_table():
    # models/gpt_oss.py (0.5.16 and 0.5.17 alike), tiny-gptoss: hidden 512, 8 heads / 2 kv heads
    # of 64, 4 experts of 512, attention_bias. GptOssAttention.__init__: qkv_proj (stacked from
    # q/k/v_proj by _load_normal_weights' stacked_params_mapping) and o_proj with bias, sinks
    # Parameter(num_heads). GptOssSparseMoeBlock.__init__: router TinyGemmLinear(hidden -> experts,
    # bias); experts FusedMoE with_bias, loaded from experts.gate_up_proj / down_proj (+ _bias)
    # via FusedMoE.make_expert_params_mapping_fused, weights transposed at load: the checkpoint
    # holds (experts, in, out). GptOssDecoderLayer: input_layernorm, post_attention_layernorm.
    layer = {"input_layernorm.weight": (512,), "post_attention_layernorm.weight": (512,),
             "self_attn.q_proj.weight": (512, 512), "self_attn.k_proj.weight": (128, 512),
             "self_attn.v_proj.weight": (128, 512), "self_attn.o_proj.weight": (512, 512),
             "self_attn.q_proj.bias": (512,), "self_attn.k_proj.bias": (128,),
             "self_attn.v_proj.bias": (128,), "self_attn.o_proj.bias": (512,), "self_attn.sinks": (8,),
             "mlp.router.weight": (4, 512), "mlp.router.bias": (4,),
             "mlp.experts.gate_up_proj": (4, 512, 1024), "mlp.experts.gate_up_proj_bias": (4, 1024),
             "mlp.experts.down_proj": (4, 512, 512), "mlp.experts.down_proj_bias": (4, 512)}
    expected = {"model.embed_tokens.weight": (32000, 512), "model.norm.weight": (512,),
                "lm_head.weight": (32000, 512)}
    for i in range(4):
        expected.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
    assert _specs("tiny-gptoss") == expected
    assert len(expected) == 3 + 4 * 17 == 71


def test_gpt_oss_expert_std_follows_the_input_width(tmp_path):
    t = safetensors_torch.load_file(str(make_model(ROOT / "fixtures/models/tiny-gptoss", tmp_path / "g")))
    gate_up = t["model.layers.2.mlp.experts.gate_up_proj"].float()  # (experts, hidden 512 in, 1024 out)
    assert abs(gate_up.std().item() - 512 ** -0.5) < 0.002
