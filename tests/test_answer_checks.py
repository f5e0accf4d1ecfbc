"""Each /generate answer checked against itself (harness/answer_checks.py, issue 44): the checks
one answer must pass with no base to compare with, on the client's own parse."""

from __future__ import annotations

import pytest

from harness.answer_checks import SinceFlush, answer_violations, raise_violations
from harness.client import Generation, Logprobs, generate_body
from harness.errors import ServerFinding

PROMPT = [5, 6, 7, 8, 9]


def answer(ids, lps, tops, cached=0):
    return Generation(tuple(ids), {"output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)],
                                   "output_top_logprobs": [[[lp, t, None] for lp, t in top] for top in tops],
                                   "cached_tokens": cached})


def checks(gen, *, temperature=0.0, bound=None, prompt=PROMPT):
    body = generate_body(prompt, max_new_tokens=len(gen.output_ids), temperature=temperature,
                         logprobs=Logprobs(top_k=2))
    return [(v.check, v.position) for v in answer_violations(body, [prompt], [gen], [bound])]


GOOD = answer([3, 4], [-0.1, -0.2], [[(-0.1, 3), (-2.0, 1)], [(-0.2, 4), (-1.9, 0)]])


def test_a_sound_answer_passes_every_check():
    assert checks(GOOD) == []
    assert checks(GOOD, bound=0) == []


def test_a_top_k_list_in_token_id_order_is_a_finding_in_any_mode():
    by_id = answer([3, 4], [-0.1, -0.2], [[(-2.0, 1), (-0.1, 3)], [(-1.9, 0), (-0.2, 4)]])
    for temperature in (0.0, 0.7):  # sorted by id: out of logprob order whatever the sampling
        assert ("output top-k not sorted by logprob", 0) in checks(by_id, temperature=temperature)
    ties = answer([3], [-0.5], [[(-0.5, 3), (-0.5, 1)]])
    assert checks(ties) == []  # equal logprobs may come in any order


def test_a_logprob_above_zero_and_a_greedy_token_not_first_are_findings():
    positive = answer([3], [0.25], [[(0.25, 3), (-2.0, 1)]])
    assert ("output logprob above 0", 0) in checks(positive)
    second = answer([1], [-2.0], [[(-0.1, 3), (-2.0, 1)]])
    assert checks(second) == [("greedy token not first in its top-k", 0)]
    assert checks(second, temperature=0.7) == []  # sampling may pick the second


def test_as_many_top_k_lists_as_tokens():
    short = Generation((3, 4), {"output_token_logprobs": [[-0.1, 3, None], [-0.2, 4, None]],
                                "output_top_logprobs": [[[-0.1, 3, None]]], "cached_tokens": 0})
    assert checks(short) == [("as many top-k lists as tokens", None)]


def test_cached_tokens_above_the_prompt_or_after_a_flush_are_findings():
    assert checks(answer([3], [-0.1], [[(-0.1, 3)]], cached=6)) == [("cached_tokens above the prompt", None)]
    assert checks(answer([3], [-0.1], [[(-0.1, 3)]], cached=4), bound=0) == [("cached_tokens after a flush", None)]
    assert checks(answer([3], [-0.1], [[(-0.1, 3)]], cached=4), bound=4) == []
    assert checks(answer([3], [-0.1], [[(-0.1, 3)]], cached=4), bound=None) == []


def test_a_violation_names_the_request_and_position():
    body = generate_body([PROMPT, [1, 2]], max_new_tokens=1, logprobs=Logprobs(top_k=2))
    gens = [GOOD, answer([1], [-2.0], [[(-0.1, 3), (-2.0, 1)]])]
    with pytest.raises(ServerFinding) as err:
        raise_violations(answer_violations(body, [PROMPT, [1, 2]], gens, [None, None]))
    assert str(err.value) == ("/generate answer 1 of 2 (a prompt of 2 tokens: [1, 2]): at temperature 0 output "
                              "position 0 chose token 1 (-2.0) while its top-k ranks token 3 higher (-0.1)")
    assert err.value.samples[0]["check"] == "greedy token not first in its top-k"


def test_what_was_sent_since_a_flush_bounds_the_cached_tokens():
    since = SinceFlush()
    call, alone = since.begin()
    assert since.end(call, alone, [PROMPT], [[1]]) == [None]  # never flushed: unknown
    since.flushed()
    call, alone = since.begin()
    assert since.end(call, alone, [PROMPT, [9, 9]], [[1], [2]]) == [0, 0]
    call, alone = since.begin()
    assert since.end(call, alone, [PROMPT + [1, 3]], [[4]]) == [6]  # the first turn and its output
    first, alone_first = since.begin()
    second, alone_second = since.begin()  # another thread's call overlaps: no bound for either
    assert since.end(first, alone_first, [PROMPT], [[1]]) == [None]
    assert since.end(second, alone_second, [PROMPT], [[1]]) == [None]
    call, alone = since.begin()
    assert since.end(call, alone, [PROMPT], None) == [None]  # a failed call: unknown until a flush
    call, alone = since.begin()
    assert since.end(call, alone, [PROMPT], [[1]]) == [None]


def test_a_batch_with_sampling_parameters_per_prompt_is_checked_prompt_by_prompt():
    """Seen: seeded_sampling sends one sampling_params table per prompt (each its own seed); the
    checks read the body's table as one and failed (AttributeError) on every such answer."""
    second = answer([1], [-2.0], [[(-0.1, 3), (-2.0, 1)]])
    body = generate_body(PROMPT, max_new_tokens=1, temperature=0.0, logprobs=Logprobs(top_k=2))
    body["input_ids"] = [PROMPT, PROMPT]
    body["sampling_params"] = [{"temperature": 0.7, "sampling_seed": 1}, {"temperature": 0.0, "sampling_seed": 2}]
    found = answer_violations(body, [PROMPT, PROMPT], [second, second], [None, None])
    assert [(v.check, v.answer) for v in found] == [("greedy token not first in its top-k", 1)]
