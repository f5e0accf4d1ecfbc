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
