"""make-model: a real safetensors file, seeded, at the intended scale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.model_tool import make_model

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


def test_unsupported_architecture_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="GptOssForCausalLM is not supported"):
        make_model(ROOT / "fixtures/models/tiny-gptoss", tmp_path / "x")


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
    t3 = safetensors_torch.load_file(str(make_model(ROOT / "fixtures/models/tiny-llama-eagle3", tmp_path / "e3")))
    assert t3["fc.weight"].shape == (256, 768)
    assert t3["midlayer.self_attn.q_proj.weight"].shape == (256, 512)
    assert t3["lm_head.weight"].shape == (32000, 256)
