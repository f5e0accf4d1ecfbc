"""kl: decode with logprobs, then flush and replay prompt+output as one prefill.

SGLang's check (test/kl_test_utils.py): greedy decode with `ignore_eos`, replay with
`max_new_tokens=0, logprob_start_len=0`, k3 on the sampled tokens' logprobs. Under
deterministic inference the two must agree bit for bit.
"""

from __future__ import annotations

from harness.probes.base import ProbeContext, ProbeKind
from harness.probes.common import batches, cold_replay, describe_kl, kl_metric
from harness.results import ProbeOutput


def run(ctx: ProbeContext) -> ProbeOutput:
    prompts = list(ctx.workload.prompts)
    batch = int(ctx.param("batch_size", len(prompts)))
    total = 2 * len(prompts)
    ctx.client.flush_cache()
    outputs, decode_lps = [], []
    for chunk in batches(prompts, batch):
        for gen in ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len,
                                       return_logprob=True, logprob_start_len=-1):
            outputs.append(gen.output_ids)
            decode_lps.append(gen.output_logprobs)
        ctx.advance(len(outputs), total)
    sequences = [list(p) + list(o) for p, o in zip(prompts, outputs)]
    replay_lps = cold_replay(ctx.client, sequences, [len(o) for o in outputs], batch)
    ctx.advance(total, total)
    metric, facts, per = kl_metric(replay_lps, decode_lps, deterministic=ctx.deterministic,
                                   tau=float(ctx.param("tau", 1e-6)),
                                   threshold=ctx.param("threshold", None))
    samples = tuple(
        {"prompt_len": len(p), "output_ids": list(o), "decode_logprobs": d, "replay_logprobs": r, **x}
        for p, o, d, r, x in zip(prompts, outputs, decode_lps, replay_lps, per)
    )
    return ProbeOutput(samples=samples, metrics=(metric,), facts=facts)


PROBE = ProbeKind("kl", run, "decode vs cold prefill replay (k3 on sampled-token logprobs)",
                  describe=describe_kl)
