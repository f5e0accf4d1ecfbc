"""detcheck make-model: write a tiny checkpoint with seeded random weights for a config.json.

Use it where `--load-format dummy` gives near-uniform logits and so no KL or accept-length
signal. Needs torch (pip install 'sglang-detcheck[model-tools]').
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.checkpoints.weights import make_model


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-model", help="write seeded random weights (safetensors) for a config",
                       description=__doc__)
    p.add_argument("config_dir", type=Path, help="directory with config.json (e.g. fixtures/models/tiny-llama)")
    p.add_argument("--out", type=Path, required=True, help="output model directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiplier on the 1/sqrt(fan_in) weight std (default 1)")
    p.add_argument("--force", action="store_true",
                   help="replace the model.safetensors and config files --out already holds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = make_model(args.config_dir, args.out, args.seed, args.scale, args.force)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0
