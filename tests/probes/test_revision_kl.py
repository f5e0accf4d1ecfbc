"""revision_kl's comparison across the two sides' cells: exact under deterministic mode (any
served difference, located at its (prompt, position)), paired against the base's own
run-to-run noise otherwise; and the reproducer it hands a *different* verdict."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from pathlib import Path

import pytest

from harness.commands.common_args import exit_code
from harness.compare import compare_pair, overall
from harness.probes import PROBES
from harness.probes.revision_kl import continuations, first_divergence
from harness.report.rows import rows
from harness.result_files import read_run, write_run
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, RunResult, Status
from harness.verdict_stats import Kind, Verdict

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
    assert set(comp.metrics) == {"scored_logprobs", "scored_topk", "greedy_ids", "greedy_logprobs", "greedy_topk"}
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
    # what each side's samples hold there (log 0.5, shifted by 0.05 on the candidate)
    assert rep.expect.endswith("; base returned logprob -0.693, candidate -0.643 at prompt 1, input position 3")


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
    assert rep.expect.endswith("; base returned token 8, candidate 42 at prompt 2, output position 1; "
                               "both returned logprob -0.2 there")


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


def test_a_noisy_base_scored_once_is_an_error_never_a_pass():
    # *unknown* exits 0: a pair that cannot be compared is an error (exit 1) with its reason
    base = [sample(i) for i in range(3)]
    comp = compare(base, base, deterministic=False)
    assert comp.verdict == Verdict.ERROR and "not_comparable" in comp.judged["candidate"]
    assert comp.note == "the base scored once: no run-to-run reference"
    assert exit_code(overall([comp])) == 1


def test_sides_that_scored_different_sequences_are_not_compared():
    base = [sample(i) for i in range(3)]
    cand = [dict(s, input_ids=s["input_ids"][:-1]) for s in base]
    comp = compare(base, cand)
    assert comp.verdict == Verdict.ERROR and comp.note == "the two sides scored different sequences"
    assert comp.judged["candidate"] == {"not_comparable": "the two sides scored different sequences"}


def test_a_verdict_metric_the_cells_do_not_hold_is_an_error_that_names_what_was_compared():
    base = [sample(i) for i in range(3)]
    cand = [sample(0), sample(1, shift_at=(1, 3)), sample(2)]
    # kl is judged only off deterministic mode: on a deterministic pair nothing named decides
    comp = compare(base, cand, verdict_metrics=["kl"])
    assert comp.verdict == Verdict.ERROR and exit_code(overall([comp])) == 1
    assert comp.note.startswith("no deciding metric was measured on both sides (deciding: kl; compared: "
                                "scored_logprobs, scored_topk, greedy_ids, greedy_logprobs, greedy_topk)")
    assert comp.changed_not_deciding == ("scored_logprobs", "scored_topk")


def test_each_derived_value_is_placed_at_its_prompt_and_position():
    """The flat metrics across derives, value i in words (ProbeKind.values): what a row shows
    instead of "differs at index 7"."""
    samples = [sample(i) for i in range(3)]
    place = lambda metric, i: PROBES["revision_kl"].values(metric).place(samples, i)  # noqa: E731
    # prompt 0 scores 5 positions (input ids 1..5), so flat value 7 is prompt 1's third: input id 3
    assert place("scored_logprobs", 7) == "prompt 1, scored token 3"
    assert place("scored_logprobs", 0) == "prompt 0, scored token 1"
    # top-3 per position, (logprob, id) each: 6 values a position
    assert place("scored_topk", 0) == "prompt 0, scored token 1, top-1 logprob"
    assert place("scored_topk", 6 + 3) == "prompt 0, scored token 2, top-2 token id"
    assert place("greedy_ids", 4) == "prompt 1, output position 1"
    assert place("kl", 2) == "prompt 2"
    assert PROBES["revision_kl"].values("scored_logprobs").noun == "scored token"


def test_the_row_reads_the_first_difference_in_words_with_rounded_numbers():
    base = [sample(i) for i in range(3)]
    cand = [sample(0), sample(1, shift_at=(1, 3)), sample(2)]
    comp = compare(base, cand)
    b, c = cell(Role.BASE, base), cell(Role.CANDIDATE, cand)
    result = RunResult(suite="s", target="refserver", base=b.revision, candidate=c.revision, cells=(b, c),
                       comparisons=(comp,), launches=())
    (row,) = rows(result)
    # 15 scored tokens (5 + 4 + 6), prompt 1's last two shifted by +0.05 from log(0.5)
    assert row.note.startswith("scored_logprobs: mean -0.693 → -0.686; first at prompt 1, scored token 3: "
                               "-0.693 → -0.643 (2 of 15 scored tokens differ)"), row.note
    assert "index" not in row.note


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


class ServedClient:
    """A server that answers every /generate of revision_kl with one fixed distribution, and one
    NaN where `nan` says: ("scored", prompt, position), ("scored_top", …) or ("greedy_top", …)."""

    def __init__(self, nan: tuple[str, int, int]):
        self.nan = nan

    def flush_cache(self) -> None:
        pass

    def generate(self, prompts, *, max_new_tokens, logprobs=None, **_):
        from harness.client import Generation

        out = []
        for i, ids in enumerate(prompts):
            def value(what: str, j: int) -> float:
                return math.nan if self.nan == (what, i, j) else math.log(0.5)

            def tops(what: str, n: int) -> list:
                return [[[value(what, j), 7, None], [math.log(0.25), 8, None]] for j in range(n)]

            if max_new_tokens == 0:  # the teacher-forced score: every input position
                meta = {"input_token_logprobs": [[None, ids[0], None]] + [[value("scored", j), t, None]
                                                                          for j, t in enumerate(ids[1:], 1)],
                        "input_top_logprobs": [None, *tops("scored_top", len(ids))[1:]]}
                out.append(Generation((), meta))
            else:
                meta = {"output_token_logprobs": [[math.log(0.5), 7, None]] * max_new_tokens,
                        "output_top_logprobs": tops("greedy_top", max_new_tokens)}
                out.append(Generation((7,) * max_new_tokens, meta))
        return out


@pytest.mark.parametrize("nan", [("scored", 1, 3), ("scored_top", 0, 2), ("greedy_top", 2, 1)])
def test_a_nan_anywhere_revision_kl_reads_is_a_finding_not_a_value(nan):
    from harness.configs import Features, ServerConfig
    from harness.errors import ServerFinding
    from harness.suite import WorkloadSpec
    from harness.probes.base import ProbeContext
    from harness.workloads import Workload

    spec = WorkloadSpec(prompts=3, prompt_len=(4, 6), output_len=3)
    workload = Workload("w", tuple(tuple(p) for p in PROMPTS), 3, spec)
    config = ServerConfig(name="det", target="refserver", model=Path("m"), features=Features(deterministic=True))
    ctx = ProbeContext(client=ServedClient(nan), server=None, config=config, workload=workload,
                       params=PROBES["revision_kl"].validate({"top_k": 2}, "[probe.revision_kl]"), server_info={})
    with pytest.raises(ServerFinding) as found:
        PROBES["revision_kl"].run(ctx)
    assert f"prompt {nan[1]}" in str(found.value), str(found.value)
    clean = dataclasses.replace(ctx, client=ServedClient(("none", 0, 0)))
    # every position after the first of each prompt + its 32-token continuation: scored, finite
    assert PROBES["revision_kl"].run(clean).facts["scored_tokens"] == sum(len(p) + 32 - 1 for p in PROMPTS)


def test_a_noisy_row_says_what_its_two_sides_are():
    """Off deterministic mode the base side of kl is the base's rerun against the base: the
    row says so, beside the paired test."""
    base = [sample(i % 3, rescored_noise=1e-9) for i in range(9)]
    far = [sample(i % 3, noise=-0.1) for i in range(9)]
    comp = compare(base, far, deterministic=False)
    b, c = cell(Role.BASE, base, deterministic=False), cell(Role.CANDIDATE, far, deterministic=False)
    (row,) = rows(RunResult(suite="s", target="refserver", base=b.revision, candidate=c.revision, cells=(b, c),
                            comparisons=(comp,), launches=()))
    assert row.note.startswith("kl (the base's rerun vs the base → the candidate vs the base): paired Δ mean "), \
        row.note
    assert "Wilcoxon p=" in row.note


def test_one_prompt_served_far_off_is_not_same_off_deterministic_mode():
    """Eight prompts alike, one with every scored position shifted: mean KL 0.024, 24× the
    declared 1e-3 floor on mean KL. The median of the paired differences stayed at the noise and
    read *same*; kl is judged on the mean it is read by, so it is not."""
    base = [sample(i % 3, rescored_noise=1e-9) for i in range(9)]
    cand = [sample(i % 3, noise=2e-9) for i in range(9)]
    cand[4] = sample(1, noise=-0.3)
    comp = compare(base, cand, deterministic=False)
    assert comp.judged["candidate"]["kl_mean"] > 0.02
    kl = comp.metrics["kl"]
    assert kl.center == "mean" and kl.verdict != Verdict.SAME and comp.verdict != Verdict.SAME, comp.note
    assert kl.effect == pytest.approx(comp.judged["candidate"]["kl_mean"] - comp.judged["candidate"]["base_self_kl_mean"])
