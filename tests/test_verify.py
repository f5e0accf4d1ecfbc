"""Verifying a reproducer before it is published (harness/verify.py), against stub servers whose
answers depend on the request's length as a kernel chosen by length does: the samples' cut is
kept only while it still shows the difference, grown back by bisection otherwise, within the
request budget. The end-to-end tests against the reference server are in test_verify_e2e.py."""

from __future__ import annotations

import math

from harness.client import Generation
from harness.reproducer import across_form, finite_form, score_request
from harness.results import Reproducer, Role
from harness.textfmt import fmt_pair
from harness.verify import search, verify

SEQ = list(range(1, 231))  # a scored sequence of 230 tokens
LONG = 128  # the stub candidate soft-caps a request longer than this


class StubServer:
    """/generate of a teacher-forced score: logprob -1 - p/100 at input position p, soft-capped
    (30 tanh(x/30)) where `caps` and the request holds more than LONG tokens."""

    def __init__(self, caps: bool):
        self.caps, self.posted = caps, 0

    def flush_cache(self) -> None:
        self.posted += 1

    def generate_from(self, body: dict, expected: int = 1) -> list[Generation]:
        self.posted += 1
        ids = body["input_ids"]
        values = [-1.0 - p / 100 for p in range(len(ids))]
        if self.caps and len(ids) > LONG:
            values = [30.0 * math.tanh(v / 30.0) for v in values]
        entries = [[None, ids[0], None]] + [[v, t, None] for v, t in zip(values[1:], ids[1:])]
        return [Generation((), {"input_token_logprobs": entries})]


def scored_form(shortest: int = 2):
    return across_form(lambda n: (score_request(f"score {n}", SEQ[:n]),), 0, "input_token_logprobs", "input position {}",
                       shortest, len(SEQ), "scored sequence")


def post_to(servers: dict[Role, StubServer]):
    from harness.verify import post_all
    return lambda role, requests: post_all(servers[role], requests)


def test_a_cut_below_where_the_change_bites_is_grown_back_to_the_shortest_that_still_shows_it():
    servers = {Role.BASE: StubServer(False), Role.CANDIDATE: StubServer(True)}
    size, tries = search(scored_form(), post_to(servers), budget=100, repeats=2)
    assert size == LONG + 1
    # the samples' 2-token cut and every cut up to 128 tokens show nothing: rejected
    assert tries.tried[0] == (2, False) and tries.tried[1] == (len(SEQ), True)
    assert all(not shows for n, shows in tries.tried if n <= LONG) and all(shows for n, shows in tries.tried if n > LONG)
    assert tries.count(size) == (2, 2) and tries.calls == 2 * len(tries.tried) == sum(s.posted for s in servers.values())


def test_a_cut_that_shows_it_is_kept_and_confirmed():
    servers = {Role.BASE: StubServer(False), Role.CANDIDATE: StubServer(True)}
    size, tries = search(scored_form(shortest=200), post_to(servers), budget=100, repeats=3)
    assert size == 200 and tries.tried == [(200, True)] * 3


def test_a_request_that_never_shows_it_is_kept_whole():
    servers = {Role.BASE: StubServer(False), Role.CANDIDATE: StubServer(False)}
    size, tries = search(scored_form(), post_to(servers), budget=100, repeats=2)
    assert size == len(SEQ) and tries.count(size) == (0, 2) and not tries.ran_out


def test_the_budget_bounds_the_requests_and_says_when_it_ran_out():
    servers = {Role.BASE: StubServer(False), Role.CANDIDATE: StubServer(True)}
    size, tries = search(scored_form(), post_to(servers), budget=8, repeats=2)
    assert tries.calls <= 8 and tries.ran_out
    assert size > LONG and any(n == size and shows for n, shows in tries.tried)  # the shortest seen to show it


def test_verify_publishes_the_grown_cut_with_what_each_side_answered():
    form = scored_form()
    rep = Reproducer(prompts=(0,), first_divergent={"prompt": 0, "position": 1}, requests=form.requests(2),
                     expect="from the samples", shrink="From the stored samples: 230 → 2 tokens", form=form,
                     position_range=(0, 2))
    servers = {Role.BASE: StubServer(False), Role.CANDIDATE: StubServer(True)}
    out = verify(rep, servers, "relaunched", budget=100, repeats=2)
    v = out.verification
    assert v.shows and v.size == LONG + 1 and v.dimension == "scored sequence" and v.servers == "relaunched"
    assert len(out.requests[0].body["input_ids"]) == LONG + 1 and out.re_measurements == v.calls
    shown = fmt_pair(-1.01, 30.0 * math.tanh(-1.01 / 30.0))  # input position 1 on each side
    assert v.observed == f"base returned logprob {shown[0]}, candidate {shown[1]} at input position 1"
    assert "grown back to 129" in out.shrink and "2 does not" in out.shrink
    assert out.position_range is None  # the samples' placing, made for the cut that did not show it, is dropped
    assert out.expect.startswith("observed on the servers of both sides (2 of 2 attempts)")


def test_a_reproducer_that_does_not_reproduce_says_so_and_keeps_the_whole_request():
    form = scored_form()
    rep = Reproducer(prompts=(0,), first_divergent=None, requests=form.requests(2), expect="from the samples",
                     shrink="From the stored samples", form=form)
    servers = {Role.BASE: StubServer(False), Role.CANDIDATE: StubServer(False)}
    out = verify(rep, servers, "still up", budget=100, repeats=2)
    assert not out.verification.shows and out.verification.reproduced == 0
    assert len(out.requests[0].body["input_ids"]) == len(SEQ)
    assert out.expect.startswith("NOT reproduced") and "unshrunk" in out.shrink


def test_a_finding_reads_a_number_on_one_side_and_nan_on_the_other():
    class Decoder(StubServer):
        def generate_from(self, body, expected=1):
            n = body["sampling_params"]["max_new_tokens"]
            values = [float("nan") if self.caps and t >= 24 else -0.0883 for t in range(n)]
            return [Generation(tuple(range(n)), {"output_token_logprobs": [[v, t, None] for t, v in enumerate(values)]})]

    from harness.reproducer import FLUSH, decode_request
    form = finite_form(lambda n: (FLUSH, decode_request("decode", [1, 2, 3], n)), 25, 32)
    servers = {Role.BASE: Decoder(False), Role.CANDIDATE: Decoder(True)}
    size, tries = search(form, post_to(servers), budget=100, repeats=2)
    assert size == 25 and tries.count(25) == (2, 2)
    assert form.words(*tries.seen[25]) == "base returned logprob -0.0883, candidate NaN at output position 24"


def test_the_report_leads_with_whether_it_reproduced():
    from harness.report.markdown import verification_text
    from harness.results import Verification
    rep = Reproducer(prompts=(0,), first_divergent=None, requests=(), expect="e", shrink="s")

    def said(**v) -> str:
        fields = dict(reproduced=2, attempts=2, observed="o", tried=((5, True), (5, True)), dimension="max_new_tokens",
                      size=5, calls=8, budget=96, budget_ran_out=False, servers="relaunched")
        return verification_text(Reproducer(**{**rep.__dict__, "verification": Verification(**{**fields, **v})}))

    assert verification_text(rep).startswith("Not verified on servers: built from the stored samples alone")
    assert said() == "Verified: reproduced 2 of 2 on servers of both sides (relaunched) at max_new_tokens 5, " \
                     "8 requests posted."
    assert said(reproduced=1).startswith("Reproduced only 1 of 2") and "not a reliable reproducer" in said(reproduced=1)
    assert said(reproduced=0).startswith("**Not reproduced**") and "the whole request measured" in said(reproduced=0)
    assert said(budget_ran_out=True).endswith("; the budget of 96 requests ran out.")
    assert said(attempts=0, error="the base's server did not start again: boom") == \
        "Not verified on servers (relaunched): the base's server did not start again: boom."


class EchoServer:
    """A /generate that returns output ids of its own (100, 101, …) and records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[int]] = []

    def flush_cache(self) -> None:
        pass

    def generate_from(self, body: dict, expected: int = 1) -> list[Generation]:
        self.inputs.append(list(body["input_ids"]))
        n = body["sampling_params"]["max_new_tokens"]
        return [Generation(tuple(range(100, 100 + n)), {})]


def test_a_next_turn_that_follows_an_answer_carries_that_answer_and_keeps_its_own_new_text():
    """accept_length's turn 2 is prompt + this side's turn-1 output + the next prompt's start: the
    body holds the stored output (7, 7, 7) in its place; the server's own (100, 101, 102) goes
    there, and the new text (8, 9) stays. A replay (nothing after the output) is as it was."""
    from harness.client import generate_body
    from harness.results import Request
    from harness.verify import post_all

    server = EchoServer()
    first = Request("turn 1", "/generate", generate_body([1, 2], max_new_tokens=3))
    turn2 = Request("turn 2", "/generate", generate_body([1, 2, 7, 7, 7, 8, 9], max_new_tokens=3), follows=(0, 2))
    replay = score_request("replay", [1, 2, 7, 7, 7], follows=(0, 2))
    post_all(server, (first, turn2, replay))
    assert server.inputs == [[1, 2], [1, 2, 100, 101, 102, 8, 9], [1, 2, 100, 101, 102]]
