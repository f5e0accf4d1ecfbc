"""Reproducers built from stored samples alone: the request form per probe, the located
difference where a probe has none, nothing for a verdict other than *different*."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from conftest import DATA
from harness.client import Generation
from harness.compare import compare_pair
from harness.suite import WorkloadSpec
from harness.probes.determinism import batch
from harness.reproduce import reproducer
from harness.result_files import read_run
from harness.textfmt import fmt_distinct
from harness.results import CellResult, Metric, Reproducer, Request, RevisionInfo, Role, Status, Verification
from harness.verdict_stats import Kind, Verdict
from harness.workloads import build

SPEC = WorkloadSpec(prompts=3, prompt_len=(5, 8), output_len=4)


def cell(probe: str, role: Role, metrics: tuple[Metric, ...], facts: dict, samples=()) -> CellResult:
    return CellResult(config="c", probe=probe, role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w", samples=tuple(samples),
                      metrics=metrics, facts=facts, metadata={"workload": SPEC.to_dict()})


def determinism_pair(unique_cand: int):
    facts = lambda unique, first: {"unique_outputs": unique, "first_differing_batch_size": first}  # noqa: E731
    metric = lambda unique: (Metric("unique_outputs", Kind.EXACT, (float(unique),)),)  # noqa: E731
    sample = {"batch_size": 1, "signature": "s", "output_ids": [1], "logprobs": None}
    return (cell("determinism", Role.BASE, metric(1), facts(1, None), [sample]),
            cell("determinism", Role.CANDIDATE, metric(unique_cand), facts(unique_cand, 3 if unique_cand > 1 else None),
                 [sample]))


def test_determinism_reproducer_sends_prompt_zero_alone_and_in_the_first_batch_that_differs():
    comp = compare_pair("c", "determinism", *determinism_pair(2), {})
    rep = comp.reproducer
    prompts = [list(p) for p in build(SPEC).prompts]
    alone, batched = rep.requests
    assert alone.body["input_ids"] == prompts[0]
    assert batched.body["input_ids"] == [list(p) for p in batch(prompts, 3)] == [prompts[0], prompts[1], prompts[2]]
    assert rep.first_divergent == {"prompt": 0, "batch_size": 3, "what": "batch size", "side": "candidate"}
    assert all(r.body["sampling_params"]["max_new_tokens"] == SPEC.output_len for r in rep.requests)


def test_no_reproducer_unless_different():
    assert compare_pair("c", "determinism", *determinism_pair(1), {}).reproducer is None


def test_a_probe_without_a_request_form_gets_the_located_difference():
    peak = lambda v: (Metric("swa_peak", Kind.EXACT, (v, 10.0)),)  # noqa: E731
    comp = compare_pair("c", "swa_peak", cell("swa_peak", Role.BASE, peak(5.0), {}),
                        cell("swa_peak", Role.CANDIDATE, peak(9.0), {}), {})
    rep = comp.reproducer
    assert comp.verdict == "different" and rep.requests == ()
    assert rep.first_divergent == {"index": 0, "metric": "swa_peak"}
    # in words, placed as the probe declares its values, the numbers as the report shows them
    assert rep.expect == "swa_peak at request 0: base 5, candidate 9"


def test_a_curl_line_is_one_argv_whose_body_is_the_request():
    body = {"input_ids": [1, 2], "note": "it's \"quoted\""}
    argv = shlex.split(Request("x", "/generate", body).curl(port=1234))
    assert argv[4] == "http://127.0.0.1:1234/generate" and json.loads(argv[-1]) == body
    assert shlex.split(Request("cold", "/flush_cache").curl()) == ["curl", "-s", "-X", "POST",
                                                                   "http://127.0.0.1:30000/flush_cache"]


def test_a_reproducer_round_trips():
    rep = Reproducer(prompts=(2,), first_divergent={"prompt": 2, "position": 7}, position_range=(48, 64),
                     requests=(Request("cold", "/flush_cache"), Request("x", "/generate", {"input_ids": [1]})),
                     expect="e", shrink="s", re_measurements=0)
    assert Reproducer.from_dict(json.loads(json.dumps(rep.to_dict()))) == rep
    verified = dataclasses.replace(
        rep, re_measurements=12, requests=(*rep.requests, Request("replay", "/generate", {"input_ids": [1, 9]}, (1, 1))),
        verification=Verification(reproduced=1, attempts=2, observed="o", tried=((2, False), (9, True), (9, False)),
                                  dimension="max_new_tokens", size=9, calls=12, budget=20, budget_ran_out=True,
                                  servers="relaunched", error=""))
    assert Reproducer.from_dict(json.loads(json.dumps(verified.to_dict()))) == verified
    assert verified.to_dict()["requests"][-1]["follows"] == [1, 1] and "follows" not in rep.to_dict()["requests"][1]


def with_sample(cell: CellResult, i: int, **values) -> CellResult:
    samples = list(cell.samples)
    samples[i] = {**samples[i], **values}
    return dataclasses.replace(cell, samples=tuple(samples))


@pytest.mark.parametrize("probe, answered", [("kl", "decode"), ("prefill_cache_hit", "hit")])
def test_a_self_check_reproducer_says_what_each_side_returned_never_that_a_side_agrees(probe, answered):
    """demo-cache's cells, the candidate diverging at prompt 0, output position 3, and the base
    not bit-exact there either (an H200 base: -1.239936 answered, -1.238908 replayed): the
    expectation quotes both sides' samples; "equal" only where they are."""
    run = read_run(DATA / "demo-cache.json")
    comp = dataclasses.replace(next(c for c in run.comparisons if c.probe == probe), verdict=Verdict.DIFFERENT)
    base, cand = (run.cell(comp.config, probe, role) for role in (Role.BASE, Role.CANDIDATE))
    key = f"{answered}_logprobs"
    moved = lambda cell, answer, replay: with_sample(  # noqa: E731
        cell, 0, first_divergent=3, **{key: [*cell.samples[0][key][:3], answer, *cell.samples[0][key][4:]],
                                       "replay_logprobs": [*cell.samples[0]["replay_logprobs"][:3], replay,
                                                           *cell.samples[0]["replay_logprobs"][4:]]})
    cand = moved(cand, -0.5, -0.25)
    rep = reproducer(comp, moved(base, -1.239936, -1.238908), cand, [])
    assert rep.first_divergent["position"] == 3 and rep.first_divergent["side"] == "candidate"
    assert (f"observed at prompt 0, output position 3: the base's {answered} returned -1.24, its replay -1.239; "
            f"the candidate's {answered} returned -0.5, its replay -0.25") in rep.expect
    assert "equal" not in rep.expect.split("input_token_logprobs")[-1]
    bit_exact_base = moved(base, -1.239936, -1.239936)
    assert f"the base's {answered} returned -1.24, its replay -1.24 (equal)" in reproducer(
        comp, bit_exact_base, cand, []).expect
    # Each side's pair told apart within itself ("-0.777, its replay -0.776" on both) hid that the
    # sides differ: all four values are shown at the digits that tell apart every two that differ.
    close = reproducer(comp, moved(base, -0.77745, -0.77612), moved(cand, -0.77749, -0.77612), []).expect
    assert (f"the base's {answered} returned -0.77745, its replay -0.77612; "
            f"the candidate's {answered} returned -0.77749, its replay -0.77612") in close, close


def test_values_shown_together_read_apart_wherever_they_differ():
    assert fmt_distinct([-0.77745, -0.77612, -0.77749, -0.77612]) == ["-0.77745", "-0.77612", "-0.77749", "-0.77612"]
    assert fmt_distinct([-0.5, -0.25, -0.5]) == ["-0.5", "-0.25", "-0.5"]
    assert fmt_distinct([1.0, 1.0 + 2 ** -52]) == ["1", "1.0000000000000002"]
    assert fmt_distinct([float("nan"), -1.5, 7]) == ["nan", "-1.5", "7"]


def answers_with_tops(output: list[int], decode_top: list[list], replay_top: list[list], prompt_len: int) -> list:
    """One side's answers to kl's requests (flush, decode, flush, replay) as the server sends them:
    the sampled tokens' logprobs equal on decode and replay, the top-k lists as given."""
    entry = lambda top: [[lp, tid, None] for lp, tid in top]  # noqa: E731
    decode = Generation(tuple(output), {"output_token_logprobs": [[top[0][0], t, None] for t, top in zip(output, decode_top)],
                                        "output_top_logprobs": [entry(top) for top in decode_top]})
    scored = [None] * prompt_len + [[top[0][0], t, None] for t, top in zip(output, replay_top)]
    replay = Generation((), {"input_token_logprobs": scored,
                             "input_top_logprobs": [None] * prompt_len + [entry(top) for top in replay_top]})
    return [None, decode, None, replay]


@pytest.mark.parametrize("decided", ["topk_kl", "topk_first_divergent"])
def test_a_kl_row_decided_by_a_top_k_list_is_checked_as_top_k_lists_not_by_logprobs(decided):
    """softcap-verified's kl cells, the candidate's decode top-k at prompt 0, output position 2
    reordered (topk_first_divergent) or with an alternative's logprob moved (topk_kl): every
    sampled logprob equals its replay's, so a decode-vs-replay logprob check reads the sides
    alike ("NOT reproduced"); the reproducer decodes 3 tokens and compares the lists in order."""
    run = read_run(DATA / "softcap-verified.json")
    comp = next(c for c in run.comparisons if c.probe == "kl")
    base = run.cell(comp.config, "kl", Role.BASE)
    top = [list(map(list, position)) for position in base.samples[0]["decode_top_logprobs"]]
    bent = [list(position) for position in top]
    bent[2] = bent[2][::-1] if decided == "topk_first_divergent" else [bent[2][0], [bent[2][1][0] - 0.25, bent[2][1][1]],
                                                                         *bent[2][2:]]
    cand = with_sample(dataclasses.replace(base, role=Role.CANDIDATE), 0, decode_top_logprobs=bent)
    metric = dataclasses.replace(comp.metrics[decided], verdict=Verdict.DIFFERENT, first_difference=0)
    comp = dataclasses.replace(comp, verdict=Verdict.DIFFERENT, decided_by=decided,
                               metrics={**comp.metrics, decided: metric})
    rep = reproducer(comp, base, cand, [])
    assert rep.first_divergent == {"prompt": 0, "position": 2, "what": "decode top-k list vs cold replay",
                                   "side": "candidate"}
    assert [r.path for r in rep.requests] == ["/flush_cache", "/generate", "/flush_cache", "/generate"]
    assert rep.requests[1].body["sampling_params"]["max_new_tokens"] == 3
    output, prompt_len = base.samples[0]["output_ids"][:3], base.samples[0]["prompt_len"]
    form = rep.form
    seen_base = form.read(3, answers_with_tops(output, top[:3], top[:3], prompt_len))
    seen_cand = form.read(3, answers_with_tops(output, bent[:3], top[:3], prompt_len))
    assert form.reproduced(seen_base, seen_cand) and seen_cand.value == 2 and seen_base.value is None
    said = form.words(seen_base, seen_cand)
    assert said.startswith("at output position 2: the base's decode listed top-k ids"), said
    assert ("(the same entries, another order)" in said) == (decided == "topk_first_divergent"), said
