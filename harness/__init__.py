"""sglang-detcheck: deterministic-inference validation harness for SGLang."""

__version__ = "0.2.0"
