"""The reference probe's comparison: each side's answers against its reference configuration's cell of
the same revision, base vs candidate exactly; never *same* where the candidate departs from its
reference; an *error* naming the reason where the reference cannot be read; which configuration is
whose reference, and the planner's and the suite's checks of it."""

from __future__ import annotations

import dataclasses

import pytest

from harness.compare import compare_pair, compare_run
from harness.errors import UsageError
from harness.probes import PROBES
from harness.probes.reference import PHASES, first_divergence, reference_of
from harness.report.rows import rows
from harness.results import CellResult, RevisionInfo, Role, RunResult, Status
from harness.verdict_stats import Verdict

KIND = PROBES["reference"]
PROMPTS = [[5, 6, 7, 8], [9, 10, 11]]
AGAINST = {"unified": "static"}


def answers(bent: tuple[str, int, int] | None = None) -> list[dict]:
    """Every phase's samples; `bent` (phase, request, position): that output token's logprob moved,
    what a corrupted cache hit serves."""
    out = []
    for phase in PHASES:
        for i, prompt in enumerate(PROMPTS[:1] if phase == "single" else PROMPTS):
            lps = [-0.5, -0.25, -0.125]
            if bent is not None and bent[:2] == (phase, i):
                lps[bent[2]] = -0.75
            out.append({"phase": phase, "request": i, "input_ids": prompt, "output_ids": [7, 8, 9],
                        "output_logprobs": lps, "output_top_logprobs": [[[lp, 7]] for lp in lps],
                        "cached_tokens": 0})
    return out


def cell(config: str, role: Role, samples: list[dict], status: Status = Status.OK, reason: str = "") -> CellResult:
    return CellResult(config=config, probe="reference", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=status, config_fingerprint=config, workload_fingerprint="w", samples=tuple(samples),
                      facts={"deterministic": True, "top_k": 1, "requests": len(samples), "phases": list(PHASES)},
                      reason=reason, metadata={"workload": {"output_len": 3}})


def run_cells(base: list[dict] | None, cand: list[dict] | None, ref_base: CellResult | None = None,
              ref_cand: CellResult | None = None) -> list[CellResult]:
    cells = [ref_base if ref_base is not None else cell("static", Role.BASE, answers()),
             ref_cand if ref_cand is not None else cell("static", Role.CANDIDATE, answers())]
    cells += [cell("unified", role, s) for role, s in ((Role.BASE, base), (Role.CANDIDATE, cand)) if s is not None]
    return [c for c in cells if c.samples or c.status != Status.OK]


def judge(cells: list[CellResult], against: dict | None = None) -> dict[str, object]:
    params = {"reference": KIND.validate({"against": AGAINST if against is None else against}, "[probe.reference]")}
    comps = compare_run(cells, params, [("static", "reference"), ("unified", "reference")])
    return {c.config: c for c in comps}


def test_a_fix_reads_different_and_says_where_the_base_departed():
    comp = judge(run_cells(answers(("hit", 1, 2)), answers()))["unified"]
    assert comp.verdict == Verdict.DIFFERENT and comp.decided_by == "diverging"
    assert comp.judged["base"]["first_divergence"] == {"phase": "hit", "request": 1, "position": 2,
                                                       "served": [9, -0.75], "reference_served": [9, -0.125],
                                                       "input_differs": False}
    assert comp.judged["candidate"]["diverging_requests"] == 0
    assert comp.reproducer is not None and comp.reproducer.first_divergent["side"] == "base"
    # the hit's seed (a cold decode of its prompt), then the hit cut after the divergent token
    assert [r.path for r in comp.reproducer.requests] == ["/flush_cache", "/generate", "/generate"]
    assert comp.reproducer.requests[-1].body["sampling_params"]["max_new_tokens"] == 3


def test_a_next_turns_reproducer_sends_every_phase_that_wrote_the_cache_it_hits():
    """The probe's multiturn request hits what the cold phase's decode and then the hit phase's
    decode of the same prompt wrote: both come before it, the turn continuing the first's output."""
    comp = judge(run_cells(answers(("multiturn", 1, 1)), answers()))["unified"]
    requests = comp.reproducer.requests
    assert [r.path for r in requests] == ["/flush_cache", "/generate", "/generate", "/generate"], requests
    assert requests[1].body["input_ids"] == requests[2].body["input_ids"] == PROMPTS[1]
    assert requests[2].what.startswith("the hit phase: prompt 1 again")
    assert requests[3].follows == (1, len(PROMPTS[1])) and requests[3].body["sampling_params"]["max_new_tokens"] == 2


def test_a_candidate_that_newly_departs_reads_different():
    comp = judge(run_cells(answers(), answers(("multiturn", 0, 1))))["unified"]
    assert comp.verdict == Verdict.DIFFERENT
    assert comp.judged["candidate"]["first_divergence"]["phase"] == "multiturn"


def test_both_sides_departing_alike_is_an_error_never_same():
    bent = answers(("hit", 0, 0))
    comp = judge(run_cells(bent, bent))["unified"]
    assert comp.verdict == Verdict.ERROR
    assert comp.note.startswith("both sides diverge from static alike (diverges from static at hit request 0, "
                                "position 0 (1 of 11 requests: hit 1))")


def test_both_sides_identical_to_their_reference_read_same():
    comps = judge(run_cells(answers(), answers()))
    assert comps["unified"].verdict == Verdict.SAME
    # the reference itself is compared across the revisions
    assert comps["static"].verdict == Verdict.SAME and comps["static"].decided_by == "revision_diverging"


def test_a_reference_that_changed_between_revisions_reads_different_on_its_own_row():
    changed = answers(("cold", 0, 0))  # the candidate serves other answers on both configurations
    cells = run_cells(answers(), changed, ref_cand=cell("static", Role.CANDIDATE, changed))
    comps = judge(cells)
    assert comps["static"].verdict == Verdict.DIFFERENT
    # unified still agrees with its (changed) reference, but serves other answers than the base's
    # unified server: every per-request figure decides under deterministic mode (issue 44)
    unified = comps["unified"]
    assert unified.metrics["diverging"].verdict == Verdict.SAME
    assert unified.verdict == Verdict.DIFFERENT and unified.decided_by == "revision_diverging"


def test_cached_tokens_of_any_phase_decide_between_the_revisions():
    """A later turn that reuses fewer cached tokens, every token and logprob the same, reads
    *different* (issue 44: the third turn's 18% fewer cached tokens read *same*)."""
    fewer = [{**s, "cached_tokens": 82} if s["phase"] == "later_turns" else {**s, "cached_tokens": 100}
             for s in answers()]
    base = [{**s, "cached_tokens": 100} for s in answers()]
    comp = judge(run_cells(base, fewer))["unified"]
    assert comp.verdict == Verdict.DIFFERENT and comp.decided_by == "cached_tokens", comp.note
    assert comp.metrics["diverging"].verdict == comp.metrics["revision_diverging"].verdict == Verdict.SAME


@pytest.mark.parametrize("ref, reason", [
    (None, "the reference configuration static: candidate: no cell of static in this run"),
    (cell("static", Role.CANDIDATE, [], Status.ERROR, "server exited with status 1"),
     "the reference configuration static: candidate: static reads error (server exited with status 1)"),
    (cell("static", Role.CANDIDATE, answers()[:3]),
     "the reference configuration static: candidate: static served other requests (another workload or version)"),
])
def test_a_reference_that_cannot_be_read_is_an_error_with_the_reason(ref, reason):
    cells = run_cells(answers(), answers(), ref_cand=ref)
    if ref is None:
        cells = [c for c in cells if not (c.config == "static" and c.role == Role.CANDIDATE)]
    comp = judge(cells)["unified"]
    assert comp.verdict == Verdict.ERROR and comp.note == reason


def test_without_the_runs_cells_a_configuration_with_a_reference_is_never_compared_with_itself():
    """compare_pair without the run's cells cannot find the reference: an error, not the
    across-revisions comparison a reference's own row gets (which would read same here)."""
    params = {"reference": KIND.validate({"against": AGAINST}, "[probe.reference]")}
    bent = answers(("hit", 0, 0))
    comp = compare_pair("unified", "reference", cell("unified", Role.BASE, bent), cell("unified", Role.CANDIDATE, bent),
                        params)
    assert comp.verdict == Verdict.ERROR and "no cell of static in this run" in comp.note


def test_rows_derive_the_metrics_with_the_reference_cells():
    cells = run_cells(answers(("hit", 1, 2)), answers())
    comps = tuple(judge(cells).values())
    result = RunResult(suite="s", target="refserver", base=RevisionInfo("base", "a" * 40),
                       candidate=RevisionInfo("candidate", "b" * 40), cells=tuple(cells), comparisons=comps,
                       launches=(), metadata={"probe_params": {"reference": {"against": AGAINST}}})
    row = next(r for r in rows(result) if r.config == "unified")
    assert row.base == "diverges from static at hit request 1, position 2 (1 of 11 requests: hit 1)"
    assert row.candidate == "bit-identical to static in every phase (11 requests)"
    assert "first at hit request 1" in row.note and ": 2 → -1 (1 of 11 requests differs)" in row.note


def test_first_divergence_reads_ids_logprobs_top_k_and_length():
    a = answers()[0]
    assert first_divergence(a, a) == -1
    assert first_divergence(a, {**a, "output_top_logprobs": [[[-0.5, 7]], [[-0.25, 8]], [[-0.125, 7]]]}) == 1
    assert first_divergence(a, {**a, "output_ids": [7, 8], "output_logprobs": [-0.5, -0.25],
                                "output_top_logprobs": a["output_top_logprobs"][:2]}) == 2
    assert first_divergence(a, {**a, "input_ids": [1]}) == 0


CONFIGS = ["static-graphs-off", "static-graphs-on", "unified-graphs-off", "unified-graphs-on"]


@pytest.mark.parametrize("config, against, expected", [
    ("unified-graphs-on", {"unified": "static"}, "static-graphs-on"),  # each mode against the same mode
    ("unified-graphs-off", {"unified-graphs-off": "static-graphs-on"}, "static-graphs-on"),  # named exactly
    ("static-graphs-on", {"static-graphs-on": "static-graphs-off"}, "static-graphs-off"),
    ("static-graphs-off", {"unified": "static"}, None),  # a reference, compared across revisions
])
def test_reference_of_a_configuration(config, against, expected):
    assert reference_of(config, {"against": against}, CONFIGS) == expected


@pytest.mark.parametrize("against, message", [
    ({"unifed": "static"}, "'unifed' is no configuration that runs the reference probe"),
    ({"unified": "lazy"}, "unified-graphs-off's reference 'lazy-graphs-off' is no configuration that runs the reference probe"),
    ({"static-graphs-on": "static-graphs-on"}, "'static-graphs-on' is its own reference"),
])
def test_the_suite_check_names_a_bad_reference(against, message):
    with pytest.raises(UsageError) as exc:
        params = KIND.validate({"against": against}, "[probe.reference]")
        KIND.check_suite(params, CONFIGS, "s.toml: [probe.reference]")
    assert message in str(exc.value)


def test_the_planner_runs_the_references_a_config_choice_leaves_out(tmp_path):
    from harness.suite import load_suite
    from harness.probes import known_probes
    from harness.pipeline.plan import with_references

    from conftest import seed_unified_cpu_suite

    suite = load_suite(seed_unified_cpu_suite(tmp_path / "seed-unified.toml"), known_probes())
    chosen = {"unified-graphs-on": ("kl", "reference")}
    assert with_references(suite, chosen) == {"static-graphs-on": ("reference",)}
    chosen["static-graphs-on"] = ("reference",)
    # a reference with a reference of its own: the next round adds it
    assert with_references(suite, chosen) == {"static-graphs-off": ("reference",)}
    assert with_references(suite, {"unified-graphs-on": ("kl",)}) == {}


def test_off_deterministic_mode_the_probe_is_not_applicable():
    from harness.errors import ProbeNotApplicable
    from harness.probes.base import ProbeContext

    ctx = ProbeContext(client=None, server=None, config=dataclasses.make_dataclass("C", ["features"])(
        dataclasses.make_dataclass("F", ["deterministic"])(False)), workload=None, params={}, server_info={})
    with pytest.raises(ProbeNotApplicable, match="needs deterministic inference"):
        KIND.run(ctx)


def test_a_suite_whose_reference_does_not_run_the_probe_is_refused_at_load(tmp_path):
    from harness.suite import load_suite
    from harness.probes import known_probes

    from conftest import refserver_suite

    path = refserver_suite(tmp_path / "s.toml", ["reference"], config="unified",
                           tables='[probe.reference]\nagainst = { unified = "static" }\n'
                                  '[[config]]\nname = "static"\ndeterministic = true\nprobes = ["kl"]\n')
    with pytest.raises(UsageError, match=r"s\.toml: \[probe\.reference\]\.against: unified's reference 'static' "
                                         r"is no configuration that runs the reference probe \(those that do: unified\)"):
        load_suite(path, known_probes())
