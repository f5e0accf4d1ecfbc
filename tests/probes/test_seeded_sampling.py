"""seeded_sampling without a server: when it is n/a, and how repeated samples are worded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.errors import ProbeNotApplicable, ServerError
from harness.probes.seeded_sampling import _sample, clones_text, run


def context(deterministic: bool, refusal: str = "", status: int = 400):
    def generate_from(body, expected=1):
        raise ServerError(f"/generate: HTTP {status}: {refusal}")

    return SimpleNamespace(deterministic=deterministic, workload=SimpleNamespace(output_len=4),
                           param={"temperature": 1.0}.get, client=SimpleNamespace(generate_from=generate_from))


def test_off_deterministic_mode_and_where_the_api_refuses_seeds_it_is_not_applicable():
    with pytest.raises(ProbeNotApplicable, match="only under deterministic inference"):
        run(context(False))
    refused = context(True, "SamplingParams.__init__() got an unexpected keyword argument 'sampling_seed'")
    with pytest.raises(ProbeNotApplicable, match="refuses seeded or parallel sampling: .*'sampling_seed'"):
        _sample(refused, [[1, 2]], [7])
    with pytest.raises(ServerError):  # any other refusal is the server's error, not n/a
        _sample(context(True, "token id 900 is outside the vocabulary"), [[1, 2]], [7])


def test_repeated_samples_are_worded_by_what_repeated():
    assert clones_text(4, [0.0, 0.0], [1, 1001], [0.0, 0.0]) == ""
    assert clones_text(4, [3.0, 0.0, 3.0], [1, 1001], [0.0, 0.0, 0.0]) == (
        "the n=4 parallel samples of one request repeat on 2 of 3 prompts (prompt 0: 1 distinct of 4)")
    assert clones_text(4, [0.0], [1, 1001, 2001], [1.0]) == (
        "different sampling seeds (1, 1001, 2001) gave the same sample on 1 of 1 prompts")


def test_a_server_that_fails_on_a_seed_is_its_error_never_not_applicable():
    # A candidate whose seeded sampling crashes (500 with its traceback) must not read n/a, which
    # is neutral: beside a base that samples, the row would pass.
    for status, refusal in ((500, "TypeError: multinomial_with_seed() got an unexpected keyword 'sampling_seed'"),
                            (500, "KeyError: 'n'")):
        with pytest.raises(ServerError, match=f"HTTP {status}"):
            _sample(context(True, refusal, status), [[1, 2]], [7])


def test_a_server_that_ignores_the_seed_is_a_finding_even_where_both_sides_sample_alike():
    # Its generator seeded at launch (--random-seed), a server that ignores sampling_seed samples
    # the same sequence on both sides: every metric matched and the row read same. Nothing it
    # sampled repeats, but no (prompt, seed) is served again as it was alone.
    import random

    from harness.client import Generation
    from harness.errors import ServerFinding

    rng = random.Random(1)

    def generate_from(body, expected=1):
        return [Generation(tuple(rng.randrange(500) for _ in range(4)),
                           {"output_token_logprobs": [[-1.0, 0, None]] * 4, "cached_tokens": 0})
                for _ in range(expected)]

    params = {"temperature": 1.0, "sampling_seed": 5, "seeds": 2, "n": 2}
    ctx = SimpleNamespace(deterministic=True, workload=SimpleNamespace(output_len=4, prompts=[[1, 2, 3], [4, 5, 6]]),
                          param=params.get, advance=lambda *_: None,
                          client=SimpleNamespace(generate_from=generate_from, flush_cache=lambda: None))
    with pytest.raises(ServerFinding, match=r"the same prompt and sampling_seed in one batch of every prompt "
                                            r"departed from its sample alone on 2 of 2 prompts \(prompt 0, sampled token 0\)"):
        run(ctx)
