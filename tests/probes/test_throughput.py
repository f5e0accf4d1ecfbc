"""throughput: its table line and metric names, and a live run on the reference server (with
accept_length, which is n/a there: no speculative decoding)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, wait
from typing import Iterator

import pytest

from conftest import ROOT, detcheck, refserver_suite
from harness.client import Generation
from harness.demo import SCENARIOS, build_repo
from harness.errors import ServerFinding, VacuousResult
from harness.probes import PROBES, throughput
from harness.probes.throughput import (ABORT_GIVE_UP_S, AbortCall, MeasurementWindow, RequestResult, level_rates,
                                       run_window)


def test_describe_and_metric_names():
    tput = PROBES["throughput"].describe(
        {"concurrency": [1, 4], "tok_s_c1_median": 50.25, "tok_s_c4_median": 150.5,
         "swa_peak_usage_c4": 0.14, "retractions": 0}, None)
    assert tput == "c1 50.2 · c4 150 tok/s, SWA peak usage 0.14, 0 retractions"
    assert throughput.metric_name(8) == "tok_s_c8"
    assert throughput.request_metric_name(8) == "req_tok_s_c8"
    retracting = PROBES["throughput"].describe(
        {"concurrency": [8], "tok_s_c8_median": 1113.6, "retractions": 3,
         "swa_tokens_at_retraction": 77824}, None)
    assert retracting == "c8 1,114 tok/s, 3 retractions (at 77,824 SWA tokens)"

    windowed = PROBES["throughput"].describe(
        {"concurrency": [8], "tok_s_c8_median": 214.0, "retractions": 5, "window_s": 240.0,
         "requests_cut": 8, "requests_sent": 8}, None)
    assert windowed == "c8 214 tok/s in a 240 s window (8 of 8 requests cut), 5 retractions"


def test_a_window_counts_the_tokens_of_cut_requests_over_the_window():
    answered = [RequestResult(completion_tokens=300, seconds=3.0, cut=False, retractions=0),
                RequestResult(completion_tokens=500, seconds=4.0, cut=True, retractions=2),
                RequestResult(completion_tokens=0, seconds=4.0, cut=True, retractions=0)]
    rates = level_rates(answered, wall=4.6, window_s=4.0)  # the aborts' answers came after 4 s
    assert rates["tok_s"] == 800 / 4.0 and rates["measured_s"] == 4.0
    assert rates["request_tok_s"] == [100.0, 125.0, 0.0]  # a request's own time in the window
    assert rates["request_cut"] == [False, True, True] and rates["requests_cut"] == 2
    # Every request ended within the window: the level's own wall time, as without one.
    assert level_rates(answered[:1], wall=3.1, window_s=4.0)["tok_s"] == 300 / 3.1
    assert "window_s" not in level_rates(answered, wall=4.6, window_s=None)
    with pytest.raises(VacuousResult, match="no request produced a token within the 0.5 s window"):
        level_rates(answered[2:], wall=0.6, window_s=0.5)


class FakeClock:
    """The window's clock, moved only by the test's streams: no test here rests on real time."""

    def __init__(self) -> None:
        self.t = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds


STEP = 0.125  # a decode step of the streams below: exact in binary, so no end falls between


def events(clock: FakeClock, tokens: int) -> Iterator[Generation]:
    """A request that streams one token per STEP and ends with its last."""
    for k in range(1, tokens + 1):
        clock.advance(STEP)
        yield Generation((), {"completion_tokens": k, "finish_reason": None if k < tokens else {"type": "length"}})


class LateClosingWindow(MeasurementWindow):
    """A window whose closing thread runs as late as it can: once every request has been tried."""

    def close_when_due(self, futures: list[Future]) -> None:
        wait(futures)
        self.close()


def late_closed_level(steps: int, n: int, workers: int) -> tuple[MeasurementWindow, list[RequestResult], list[float]]:
    """A level of `n` requests of `steps` steps each over a 1 s LateClosingWindow: the window,
    the requests answered, and when each request was sent."""
    clock = FakeClock()
    sent_at: list[float] = []

    def streamer(i: int, rid: str) -> Iterator[Generation]:
        sent_at.append(clock())
        return events(clock, steps)

    window = LateClosingWindow(lambda rid: None, 1.0, clock=clock)
    return window, run_window(window, streamer, n=n, workers=workers), sent_at


def test_no_request_starts_after_the_window_end_under_a_late_closing_thread():
    """One client, 10 requests of 3 steps, a 1 s window: requests start at 0, 0.375 and 0.75;
    the fourth's turn comes at 1.125, after the end, and the closing thread has not run yet. It
    is never sent (before: it and the six after it were, with their ends clipped below their
    starts: negative durations), and the third, cut at the end, counts its one token before it."""
    window, answered, sent_at = late_closed_level(steps=3, n=10, workers=1)
    assert sent_at == [0.0, 0.375, 0.75]
    assert [r.seconds for r in answered] == [0.375, 0.375, 0.25]
    assert [r.completion_tokens for r in answered] == [3, 3, 1]
    assert [r.cut for r in answered] == [False, False, True] and answered[2].tokens_after_window == 2


def test_concurrent_clients_never_start_a_request_at_or_after_the_end():
    """Four clients on one clock, the closing thread late: whatever the interleaving, every
    request sent started before the end and measured a positive duration."""
    window, answered, sent_at = late_closed_level(steps=2, n=40, workers=4)
    assert len(answered) == len(sent_at) < 40
    assert all(t < window.ends_at for t in sent_at), sent_at
    assert all(r.seconds > 0 for r in answered), answered


def aborted_late(delay_s: float, round_trip_s: float = 0.0, queued: int = 0, steps_after: int = 1,
                 step_after_s: float = STEP) -> tuple[RequestResult, MeasurementWindow]:
    """One request streaming past a 1 s window whose close (at the end, on the stream's own
    clock) sends the abort, answered `round_trip_s` later (a loaded host's /abort_request; a
    whole number of steps), after the aborts of `queued` other requests in flight (the close
    sends them one after another, each as slow); the server ends the request `delay_s` after it
    answered the abort, `steps_after` steps on, each step from the answer on taking
    `step_after_s`. While the closing thread waits for an answer, the stream goes on: its events
    are read meanwhile, a step apart, as the request's own thread reads them."""
    clock = FakeClock()
    aborts: list[float] = []  # when each abort of this request was answered
    rid = "r"
    made = 0  # the request's tokens so far: one a step

    def step(seconds: float) -> None:
        nonlocal made
        clock.advance(seconds)
        made += 1

    def abort(aborted: str) -> None:
        for _ in range(round(round_trip_s / STEP)):
            step(STEP)
            window.event(rid)
        if aborted == rid:
            aborts.append(clock())

    window = MeasurementWindow(abort, 1.0, clock=clock)
    for other in range(queued):
        window.admit(f"a{other}")  # in flight, their streams read elsewhere; aborted before "r"
    started = window.admit(rid)

    def late_server() -> Iterator[Generation]:
        while True:
            step(step_after_s if aborts else STEP)
            if clock() >= window.ends_at and not aborts:
                window.close()  # the closing thread, right at the end
            if aborts and clock() >= aborts[0] + delay_s + steps_after * step_after_s:
                yield Generation((), {"completion_tokens": made, "finish_reason": {"type": "abort"}})
                return
            yield Generation((), {"completion_tokens": made, "finish_reason": None})

    return window.stream(rid, late_server(), started), window


def test_an_abort_answered_late_is_a_finding_and_never_counts_its_tokens():
    """Aborts that take effect at once, 1 s late (within the harness's give-up) and 10 s late
    (beyond it): the tokens counted in the window are the same 7 each time (never a faster side);
    the late one is a finding saying how late, the ignored one one saying the harness gave up."""
    prompt, late, ignored = aborted_late(0.0), aborted_late(1.0), aborted_late(10.0)
    assert {r.completion_tokens for r, _ in (prompt, late, ignored)} == {7}
    result, window = prompt
    assert result.cut and result.abort_answer_s == STEP <= window.allowed_s
    assert level_rates([result], wall=1.2, window_s=1.0, abort_allowed_s=window.allowed_s)["tok_s"] == 7.0
    result, window = late
    assert result.abort_answer_s == 1.0 + STEP and result.tokens_after_window == 10
    with pytest.raises(ServerFinding, match=r"honoured /abort_request late: 1 of 1 requests cut by the 1 s "
                                            r"window ended 1.12-1.12 s after their abort was answered "
                                            r"\(allowed 0.50 s"):
        level_rates([result], wall=2.2, window_s=1.0, abort_allowed_s=window.allowed_s)
    result, window = ignored
    assert result.given_up and window.give_up_after_s == ABORT_GIVE_UP_S  # after its abort was answered
    with pytest.raises(ServerFinding, match="did not honour /abort_request: 1 of 1 requests cut by the 1 s window "
                                            "were still generating when the harness gave up"):
        level_rates([result], wall=4.1, window_s=1.0, abort_allowed_s=window.allowed_s)


def test_a_slow_abort_round_trip_is_the_hosts_not_the_servers():
    """On a loaded host /abort_request itself took 0.625 s to be answered, longer than the 0.5 s
    grace: a server that ends the request one step after its answer is not late (timed from the
    abort's sending, it read 0.75 s: a false finding); one that ends it 1 s after is, and says so."""
    result, window = aborted_late(0.0, round_trip_s=0.625)
    assert result.abort_answer_s == STEP and result.completion_tokens == 7
    assert level_rates([result], wall=1.8, window_s=1.0, abort_allowed_s=window.allowed_s)["tok_s"] == 7.0
    result, window = aborted_late(1.0, round_trip_s=0.625)
    assert result.abort_answer_s == 1.0 + STEP and result.completion_tokens == 7
    with pytest.raises(ServerFinding, match=r"window ended 1.12-1.12 s after their abort was answered"):
        level_rates([result], wall=2.8, window_s=1.0, abort_allowed_s=window.allowed_s)


def test_a_request_whose_abort_is_answered_last_on_a_loaded_host_is_not_given_up():
    """The window cut four requests, and on a loaded host each /abort_request took 0.75 s to be
    answered: the close sends them one after another, so the last request's abort was answered
    3 s after the close, and its server ended it two steps later (the step running, then the
    next: in time). Its stream is read to its end and the level keeps its figures. Before, the
    harness gave up 3 s after the close, whatever the abort's answer: this request, streaming its
    last step then, read "did not honour /abort_request", a finding that left the cell without
    its figures (the KeyError 'retractions' of the window run at load 13-21)."""
    result, window = aborted_late(0.0, round_trip_s=0.75, queued=3, steps_after=2)
    assert not result.given_up and result.abort_answer_s == 2 * STEP <= window.allowed_s
    assert result.completion_tokens == 7 and result.tokens_after_window == 1 + 24 + 2  # the aborts: 24 steps
    assert level_rates([result], wall=4.5, window_s=1.0, abort_allowed_s=window.allowed_s)["tok_s"] == 7.0
    # The give-up is timed from each request's own abort's answer: a server that goes on as long
    # after that answer is given up on all the same (and the test above, with no queue).
    result, window = aborted_late(10.0, round_trip_s=0.75, queued=3, steps_after=2)
    assert result.given_up
    with pytest.raises(ServerFinding, match="did not honour /abort_request"):
        level_rates([result], wall=8.0, window_s=1.0, abort_allowed_s=window.allowed_s)


def test_steps_slowed_by_the_host_after_the_close_make_no_abort_late():
    """The host got loaded as the window closed: the server's steps took 0.375 s from the abort's
    answer on (0.125 s before), and it ended the request two of them after the answer, as an
    abort honoured at once does. 0.75 s after the answer: over the 0.5 s grace that steps before
    the end alone gave (a false finding, the cell then without its figures); within two of the
    steps that ended it. A server that goes on generating as fast as before is late all the same
    (test_an_abort_answered_late_is_a_finding_and_never_counts_its_tokens)."""
    result, window = aborted_late(0.0, steps_after=2, step_after_s=0.375)
    assert result.abort_answer_s == 0.75 == window.allowed_s and not result.given_up
    assert level_rates([result], wall=1.8, window_s=1.0, abort_allowed_s=window.allowed_s)["tok_s"] == 7.0


def test_each_abort_is_timed_when_it_is_sent_and_answered():
    """Aborts go one after another: on a loaded host each /abort_request may take 0.3 s, and the
    second request's abort then leaves 0.3 s after the first; each is timed from then to its
    answer. A stream that ended before its abort was answered was not late at all."""
    clock = FakeClock()
    window = MeasurementWindow(lambda rid: clock.advance(0.3), 1.0, clock=clock)
    assert window.admit("a") == 0.0 and window.admit("b") == 0.0
    clock.advance(1.0)
    window.close()
    assert window.answered("a") == [AbortCall(1.0, 1.3)] and window.answered("b") == [AbortCall(1.3, 1.6)]
    assert AbortCall(1.0, None).ended_after_answer(1.1) == 0.0
    assert AbortCall(1.0, 1.3).ended_after_answer(1.2) == 0.0


def test_a_duration_that_is_not_positive_is_a_finding_never_a_sample():
    answered = [RequestResult(completion_tokens=10, seconds=0.5, cut=False, retractions=0),
                RequestResult(completion_tokens=10, seconds=-0.2, cut=True, retractions=0)]
    with pytest.raises(ServerFinding, match="1 of 2 requests measured a duration that is not positive"):
        level_rates(answered, wall=1.0, window_s=1.0)


@pytest.mark.slow
def test_throughput_levels_and_accept_length_not_applicable_without_spec(tmp_path):
    suite = refserver_suite(tmp_path / "live.toml", ["throughput", "accept_length"],
                            "[probe.throughput]\nconcurrency = [2, 1]\nrepeats = 3\nmax_looks = 1\nalpha = 0.5\n", config="plain",
                            deterministic=False, prompts=4, prompt_len=(16, 16), output_len=16,
                            args=("--random-seed", "1"))
    out = tmp_path / "run"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--no-progress")
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads((out / "results.json").read_text())
    cells = {(c["probe"], c["role"]): c for c in result["cells"]}
    tput = cells["throughput", "base"]
    assert tput["status"] == "ok", tput["reason"]
    # The highest level decides; per-request figures follow, one per round (its requests' median:
    # the round is the unit of replication), paired by round like the level's tok/s.
    assert [m["name"] for m in tput["metrics"]] == ["tok_s_c2", "tok_s_c1", "req_tok_s_c2", "req_tok_s_c1"]
    per_request = {m["name"]: m for m in tput["metrics"]}
    assert len(per_request["req_tok_s_c2"]["values"]) == 3 and per_request["req_tok_s_c2"]["paired"]
    by_round = [s["request_tok_s"] for s in tput["samples"] if s["concurrency"] == 2]
    assert per_request["req_tok_s_c2"]["values"] == pytest.approx([sum(r) / 2 for r in by_round])
    assert [(s["repeat"], s["concurrency"]) for s in tput["samples"]] == [(r, c) for r in range(3) for c in (1, 2)]
    assert all(s["completion_tokens"] == 16 * s["requests"] and s["tok_s"] > 0 for s in tput["samples"])
    assert "tok/s" in proc.stdout
    acc = cells["accept_length", "candidate"]
    assert acc["status"] == "n/a" and "spec_verify_ct" in acc["reason"]


@pytest.mark.slow
def test_a_window_bounds_a_level_and_counts_the_cut_requests(tmp_path):
    """20,000 tokens per request would take minutes on the reference server: a 2 s window ends
    the level with every request cut (aborted) and the tokens it had, and no second request."""
    suite = refserver_suite(tmp_path / "window.toml", ["throughput"],
                            "[probe.throughput]\nconcurrency = [2]\nrequests_per_client = 2\n"
                            "repeats = 3\nmax_looks = 1\nalpha = 0.5\nwarmup = 0\nwindow_s = 2.0\n", config="plain",
                            deterministic=False, prompts=2, prompt_len=(16, 16), output_len=20_000)
    out = tmp_path / "run"
    proc = detcheck("run", "--suite", str(suite), "--out", str(out), "--no-progress")
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads((out / "results.json").read_text())
    for cell in result["cells"]:
        assert cell["status"] == "ok", cell["reason"]
        assert len(cell["samples"]) == 3  # three rounds
        for sample in cell["samples"]:
            assert sample["wall_s"] < 2.0 + 3.0  # the window, then the aborts' answers
            assert sample["requests"] == 4 and sample["requests_sent"] == 2  # the window closed first
            assert sample["request_cut"] == [True, True] and sample["measured_s"] == 2.0
            assert 0 < sample["completion_tokens"] < 2 * 20_000 and sample["tok_s"] > 0
            assert all(v > 0 for v in sample["request_tok_s"])
        assert cell["facts"]["window_s"] == 2.0 and cell["facts"]["requests_cut"] == 6
    assert "2 s window (6 of 6 requests cut)" in (out / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("output_len, window", [(300, None), (15_000, 15.0)], ids=["to-the-end", "window"])
def test_retractions_decide_per_request_throughput_and_record_the_swa_tokens(tmp_path, output_len, window):
    """The seed-scale DFLASH case in miniature: the candidate skips SWA eviction on the DFLASH
    decode path, four long requests overflow its SWA pool and it retracts; the base never does.
    Two rounds per side (the round is the per-request metric's unit: one could decide nothing).
    With a window, as the seed-scale suite measures it, the base's requests are all cut, and the
    candidate retracts within the window.

    Nothing here rests on how fast the machine is. The candidate retracts once its 819-token SWA
    pool fills, about 160 decode steps in: the 15 s window leaves it ~90 ms a step (the reference
    server takes 3-9 ms idle). The base cannot finish 15,000 tokens within the window at any speed
    seen (290 tok/s per request, idle, is 52 s), and it has the full pool for them (4 × 15,048 of
    65,536 tokens: it never retracts). The candidate's requests are cut by the window or aborted
    by the server once one alone outgrows its SWA pool, whichever comes first: which, depends on
    the machine, so the test asserts only that each ended one of the two ways."""
    repo = build_repo(SCENARIOS["swa"], tmp_path)
    suite = tmp_path / "seed.toml"
    suite.write_text(f"""name = "seed-mini"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[server]
args = ["--random-seed", "1234", "--max-total-tokens", "65536"]
env = {{ SGLANG_SWA_EVICTION_INTERVAL = "16" }}
[workload]
prompts = 4
prompt_len = [48, 48]
output_len = {output_len}
vocab = 500
[[config]]
name = "dflash"
swa_ratio = 0.0125
speculative = {{ algorithm = "DFLASH", block_size = 8 }}
probes = ["throughput"]
[config.draft]
refserver = "{ROOT / 'fixtures/refmodels/hybrid-draft'}"
[probe.throughput]
concurrency = [4]
repeats = 3
max_looks = 1
alpha = 0.5  # three rounds (min p 0.25): what was recorded is the test, not the verdict
warmup = 0
verdict_metrics = ["req_tok_s_c4"]
{f"window_s = {window}" if window else ""}
""")
    out = tmp_path / "run"
    proc = detcheck("run", "--target", "refserver", "--repo", str(repo.path), "--base", repo.base,
                    "--candidate", repo.candidate, "--suite", str(suite), "--out", str(out), "--no-progress",
                    # Markdown: the console table wraps long cells, splitting the words checked below.
                    "--format", "md", env={"DETCHECK_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads((out / "results.json").read_text())
    cells = {c["role"]: c for c in result["cells"]}
    # Measured, on a loaded host too: a cell that is a finding or an error has no figures to check.
    assert {role: (c["status"], c["reason"]) for role, c in cells.items()} == {
        "base": ("ok", ""), "candidate": ("ok", "")}
    base, cand = cells["base"]["facts"], cells["candidate"]["facts"]
    assert base["retractions"] == 0 and "swa_tokens_at_retraction" not in base
    assert cand["retractions"] > 0 and cand["retraction_events"] > 0
    # SWA pool at ratio 0.0125 of 65,536 = 819: the candidate retracted with it filling up, as of
    # the last Decode line before (logged every 40 steps), far above the bounded base's window.
    assert 819 // 2 < cand["swa_tokens_at_retraction"] <= 819
    (comparison,) = result["comparisons"]
    assert comparison["decided_by"] == "req_tok_s_c4"
    assert len(cells["base"]["samples"][0]["request_tok_s"]) == 4
    assert "retractions (at" in proc.stdout
    if window:
        # The window cut every request of the base; each of the candidate's was cut by it or
        # aborted by the server (finish reason abort: it outgrew its SWA pool alone) before.
        assert base["requests_cut"] == 3 * 4 and base["window_s"] == window  # three rounds of four
        for cand_round in cells["candidate"]["samples"]:
            assert cand_round["requests_sent"] == 4
            # No request ran to its 15,000th token: one the window did not cut, the server ended.
            assert cand_round["completion_tokens"] < 4 * output_len
            assert cand_round["measured_s"] == min(cand_round["wall_s"], window)
        assert all(r["measured_s"] == window for r in cells["base"]["samples"])
