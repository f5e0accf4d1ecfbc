"""SGLang's own KL helpers (`sglang/test/kl_test_utils.py`, `kl_multiturn_utils.py` of a release)
loaded from their files, without the rest of SGLang: the tokenizer they use only to encode the
decode-cache-hit suffix "," is a stub, and their prompts are whatever the caller hands
`get_input_ids`'s stand-in. Used by tools/gpu/conformance.py on the GPU machine (the files of the
installed package) and by the CPU conformance test, tests/conformance/ (the files from a
downloaded wheel).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Iterator

HELPERS = ("sglang/test/kl_test_utils.py", "sglang/test/kl_multiturn_utils.py")
SUFFIX_TOKEN = 7  # what the stub tokenizer encodes "," to


class StubTokenizer:
    def __init__(self, suffix: int = SUFFIX_TOKEN):
        self.suffix = suffix

    def encode(self, text: str) -> list[int]:
        assert text == ",", text  # the helpers only encode the turn-2 suffix
        return [self.suffix]


@contextlib.contextmanager
def loaded(root: Path, suffix: int = SUFFIX_TOKEN) -> Iterator[tuple[types.ModuleType, types.ModuleType]]:
    """(kl_test_utils, kl_multiturn_utils) from `root`/sglang/test/, with only the tokenizer
    import stubbed (it encodes "," to `suffix`); every `sglang` module seen before is put back
    afterwards."""
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for k in saved:
        del sys.modules[k]
    try:
        for name in ("sglang", "sglang.test", "sglang.srt", "sglang.srt.utils"):
            pkg = types.ModuleType(name)
            pkg.__path__ = []  # a namespace to hang the loaded files on
            sys.modules[name] = pkg
        hf = types.ModuleType("sglang.srt.utils.hf_transformers_utils")
        hf.get_tokenizer = lambda *a, **kw: StubTokenizer(suffix)
        sys.modules[hf.__name__] = hf
        mods = []
        for h in HELPERS:
            name = h[:-3].replace("/", ".")
            spec = importlib.util.spec_from_file_location(name, root / h)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            mods.append(mod)
        yield tuple(mods)
    finally:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved)
