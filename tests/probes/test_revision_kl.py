"""revision_kl's comparison across the two sides' cells: exact under deterministic mode (any
served difference, located at its (prompt, position)), paired against the base's own
run-to-run noise otherwise; and the reproducer it hands a *different* verdict."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex

from harness.compare import compare_pair
from harness.probes import PROBES
from harness.probes.revision_kl import continuations, first_divergence
from harness.result_files import read_run, write_run
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, RunResult, Status
from harness.stats import Kind, Verdict

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
K = 3


def top(shift: float, position: int) -> list[list[float]]:
    """A top-3 list whose probabilities sum below 1 (the rest is the "other" bucket)."""
    return [[math.log(0.5) + shift, 100 + position], [math.log(0.2), 200], [math.log(0.1), 300]]


def sample(i: int, *, shift_at: tuple[int, int] | None = None, greedy_at: tuple[int, int] | None = None,
           noise: float = 0.0, rescored_noise: float | None = None) -> dict:
    """Prompt i's sample: the scored sequence (prompt + continuation), 3 greedy tokens; the
    scored logprob and top-1 at (prompt, position) shifted when `shift_at` names it."""
    seq = PROMPTS[i] + continuations(PROMPTS, 2)[i]

    def scored(extra: float) -> tuple[list[float], list[list[list[float]]]]:
        lps, tops = [], []
        for j in range(1, len(seq)):
            s = 0.05 if shift_at is not None and shift_at[0] == i and j >= shift_at[1] else 0.0
            lps.append(math.log(0.5) + s + extra * j)
            tops.append(top(s + extra * j, j))
        return lps, tops

    lps, tops = scored(noise)
    out = [7, 8, 9]
    if greedy_at is not None and greedy_at[0] == i:
        out[greedy_at[1]] = 42
    s = {"input_ids": seq, "prompt_len": len(PROMPTS[i]), "output_ids": out, "output_logprobs": [-0.1, -0.2, -0.3],
         "output_top_logprobs": [top(0.0, j) for j in range(3)], "scored_logprobs": lps, "scored_top_logprobs": tops,
         "scored_nll": 0.7}
    if rescored_noise is not None:
        s["rescored_logprobs"], s["rescored_top_logprobs"] = scored(rescored_noise)
    return s


def cell(role: Role, samples: list[dict], deterministic: bool = True) -> CellResult:
    spec = {"kind": "synthetic", "prompts": 3, "prompt_len": [3, 5], "output_len": 3, "seed": 0, "vocab": 500,
            "low_token": 3, "path": None}
    return CellResult(config="det", probe="revision_kl", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w", samples=tuple(samples),
                      metrics=(Metric("scored_nll", Kind.EXACT if deterministic else Kind.NOISY, (0.7,) * 3),),
                      facts={"deterministic": deterministic, "top_k": K}, metadata={"workload": spec})


def compare(base: list[dict], cand: list[dict], deterministic: bool = True, **params) -> ProbeComparison:
    judged = PROBES["revision_kl"].validate(params, "[probe.revision_kl]")
    return compare_pair("det", "revision_kl", cell(Role.BASE, base, deterministic),
                        cell(Role.CANDIDATE, cand, deterministic), {"revision_kl": judged})


def test_continuations_are_the_next_prompts_tokens_cycled_to_length():
    assert continuations(PROMPTS, 4) == [[9, 10, 11, 9], [12, 13, 14, 15], [5, 6, 7, 8]]


def test_identical_sides_read_same_exactly_with_zero_kl():
    same = [sample(i) for i in range(3)]
    comp = compare(same, same)
    assert comp.verdict == Verdict.SAME and comp.reproducer is None
    assert set(comp.metrics) == {"scored_logprobs", "scored_topk", "greedy_ids", "greedy_logprobs"}
    assert all(c.kind == "exact" and c.verdict == "same" for c in comp.metrics.values())
    facts = comp.judged["candidate"]
    assert facts["kl_mean"] == 0.0 and facts["k3_max"] == 0.0 and facts["top1_agree"] == 1.0
    assert facts["first_divergent"] is None and facts["greedy_identical"] is True


def test_one_shifted_logprob_is_different_at_its_prompt_and_position():
    base = [sample(i) for i in range(3)]
    cand = [sample(0), sample(1, shift_at=(1, 3)), sample(2)]
    comp = compare(base, cand)
    assert comp.verdict == Verdict.DIFFERENT and comp.decided_by == "scored_logprobs"
    facts = comp.judged["candidate"]
    assert facts["first_divergent"] == {"prompt": 1, "position": 3}
    assert facts["prompts_diverged"] == 1 and facts["kl_max"] > 0.0 and facts["greedy_identical"] is True
    # the flat index of prompt 1's position 3: prompt 0 scores 5 positions, then positions 1, 2, 3
    assert comp.metrics["scored_logprobs"].first_difference == 5 + 2
    rep = comp.reproducer
    assert rep.prompts == (1,) and rep.first_divergent["position"] == 3 and rep.re_measurements == 0
    (request,) = rep.requests
    assert request.body["input_ids"] == base[1]["input_ids"][:4]  # cut right after position 3
    assert request.body["logprob_start_len"] == 0 and request.body["top_logprobs_num"] == K
    assert request.body["sampling_params"]["max_new_tokens"] == 0
    argv = shlex.split(request.curl())
    assert argv[:5] == ["curl", "-s", "-X", "POST", "http://127.0.0.1:30000/generate"]
    assert json.loads(argv[-1]) == request.body


def test_a_greedy_only_difference_gets_a_decode_reproducer_cut_at_that_token():
    base = [sample(i) for i in range(3)]
    cand = [sample(0), sample(1), sample(2, greedy_at=(2, 1))]
    comp = compare(base, cand)
    assert comp.verdict == Verdict.DIFFERENT and comp.decided_by == "greedy_ids"
    assert comp.judged["candidate"]["greedy_first_diff"] == {"prompt": 2, "position": 1}
    assert comp.judged["candidate"]["decode_first_divergent"] == {"prompt": 2, "position": 1}
    rep = comp.reproducer
    flush, decode = rep.requests
    assert flush.path == "/flush_cache" and decode.body["input_ids"] == PROMPTS[2]
    assert decode.body["sampling_params"]["max_new_tokens"] == 2


def test_first_divergence_sees_a_top_k_change_with_equal_scored_logprobs():
    b, c = sample(0), sample(0)
    c["scored_top_logprobs"] = [t[:] for t in c["scored_top_logprobs"]]
    c["scored_top_logprobs"][1] = [c["scored_top_logprobs"][1][1], c["scored_top_logprobs"][1][0],
                                   c["scored_top_logprobs"][1][2]]
    assert first_divergence([b], [c]) == [{"scored": 2, "decode": None, "greedy": None}]
    c["output_logprobs"] = [-0.1, -0.25, -0.3]
    assert first_divergence([b], [c])[0]["decode"] == 1 and first_divergence([b], [c])[0]["greedy"] is None


def test_noisy_mode_judges_kl_and_agreement_against_the_bases_own_noise():
    base = [sample(i, rescored_noise=1e-9) for i in range(3)] * 3  # 9 prompts: Wilcoxon can reach 0.05
    quiet = [sample(i, noise=2e-9) for i in range(3)] * 3
    comp = compare(base, quiet, deterministic=False)
    assert set(comp.metrics) == {"kl", "top1_agree"} and comp.metrics["kl"].paired
    assert comp.verdict == Verdict.SAME, comp.note  # below the 1e-3 floor
    far = [sample(i, noise=-0.1) for i in range(3)] * 3
    comp = compare(base, far, deterministic=False)
    assert comp.verdict == Verdict.DIFFERENT and comp.decided_by == "kl", comp.note
    rep = comp.reproducer
    assert len(rep.prompts) == 1 and "largest paired" in rep.shrink
    assert comp.judged["candidate"]["base_self_kl_mean"] < comp.judged["candidate"]["kl_mean"]


def test_a_noisy_base_scored_once_is_not_judged_same():
    base = [sample(i) for i in range(3)]
    comp = compare(base, base, deterministic=False)
    assert comp.verdict == Verdict.UNKNOWN and "not_comparable" in comp.judged["candidate"]


def test_sides_that_scored_different_sequences_are_not_compared():
    base = [sample(i) for i in range(3)]
    cand = [dict(s, input_ids=s["input_ids"][:-1]) for s in base]
    comp = compare(base, cand)
    assert comp.verdict == Verdict.UNKNOWN
    assert comp.judged["candidate"] == {"not_comparable": "the two sides scored different sequences"}


def test_a_reproducer_survives_results_json(tmp_path):
    base = [sample(i) for i in range(3)]
    comp = compare(base, [sample(0, shift_at=(0, 2)), sample(1), sample(2)])
    run = RunResult(suite="s", target="refserver", base=RevisionInfo("b", "b" * 40),
                    candidate=RevisionInfo("c", "c" * 40), cells=(), comparisons=(comp,), launches=())
    write_run(tmp_path, run)
    back = read_run(tmp_path).comparisons[0]
    assert back == comp and back.reproducer.requests[0].curl() == comp.reproducer.requests[0].curl()
    assert dataclasses.replace(back, reproducer=None).to_dict().get("reproducer") is None


def test_an_infinite_kl_in_noisy_mode_is_compared_exactly_not_crashed_on():
    base = [sample(i % 3, rescored_noise=0.0) for i in range(9)]
    cand = [sample(i % 3) for i in range(9)]
    # prompt 0's candidate: its top-3 holds all the mass at every position
    cand[0]["scored_top_logprobs"] = [[[0.0, t[0][1]], *t[1:]] for t in cand[0]["scored_top_logprobs"]]
    comp = compare(base, cand, deterministic=False)
    assert comp.verdict == Verdict.DIFFERENT and comp.metrics["kl"].kind == "exact"
    assert comp.judged["candidate"]["kl_infinite_prompts"] == [0]


def test_the_cell_names_where_the_first_divergence_is_in_words():
    describe = PROBES["revision_kl"].describe
    facts = {"kl_mean": 0.003, "kl_p99": 0.004, "kl_max": 0.005, "k3_mean": 0.2, "top1_agree": 1.0,
             "greedy_identical": True, "first_divergent": {"prompt": 0, "position": 7}}
    assert describe(facts, None).endswith("greedy identical, first differs at prompt 0, scored token 7")
    decode = {**facts, "first_divergent": None, "decode_first_divergent": {"prompt": 2, "position": 1}}
    assert describe(decode, None).endswith(", first differs at prompt 2, output position 1")
    assert describe({**decode, "decode_first_divergent": None}, None).endswith("greedy identical")
