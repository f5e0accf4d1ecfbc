"""sglang-detcheck: deterministic-inference validation harness for SGLang."""

__version__ = "0.3.0"
