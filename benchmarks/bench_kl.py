"""KL maths over 48 prompts × 16k tokens: the kl probe's metric (k3 per prompt, pooled tails,
first divergence per prompt) on the JSON-shaped lists a probe receives.

    python benchmarks/bench_kl.py [PROMPTS TOKENS]
"""

from __future__ import annotations

import sys

import numpy as np

from _common import best_of
from harness import divergence
from harness.probes.common import kl_metric


def main(argv: list[str]) -> None:
    prompts, tokens = (int(argv[0]), int(argv[1])) if argv else (48, 16384)
    rng = np.random.default_rng(0)
    ref = [(-np.abs(rng.standard_normal(tokens))).tolist() for _ in range(prompts)]
    noisy = [(np.asarray(r) + rng.normal(0, 1e-3, tokens)).tolist() for r in ref]
    equal = [list(r) for r in ref]
    print(f"KL maths, {prompts} prompts × {tokens:,} tokens ({prompts * tokens:,} logprob pairs), best of 3")
    for label, test in (("identical (deterministic pass)", equal), ("perturbed (every token differs)", noisy)):
        full = best_of(3, lambda: kl_metric(ref, test, deterministic=True, tau=1e-6, paired=True))
        k3 = best_of(3, lambda: [divergence.k3(r, t) for r, t in zip(ref, test)])
        per_token = [divergence.k3_per_token(r, t) for r, t in zip(ref, test)]
        pooled = best_of(3, lambda: divergence.pooled_tails(per_token, 1e-6))
        print(f"  {label:<32} kl_metric {full:6.3f} s   k3 per prompt {k3:6.3f} s   pooled_tails {pooled:6.3f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
