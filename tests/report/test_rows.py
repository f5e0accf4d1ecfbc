"""Row notes: which models ran on dummy weights (read from a stored H200 run's server argv),
comparisons in words, side notes, paths a pasted report may show."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.report.format import portable, portable_path
from harness.report.markdown import MarkdownReport
from harness.report.rows import (comparison_text, dummy_weights_text, index_item, ratio_text, value_place,
                                 torch_change_text, without_shared_side_notes)
from harness.result_files import read_run
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, Status
from harness.verdict_stats import Floor, Kind, Verdict, compare_exact, compare_noisy
from harness.textfmt import fmt_pair

RUN = read_run(Path(__file__).resolve().parents[1] / "data" / "h200-pools.json")


def with_argv(argv: list[str]):
    cell = RUN.cells[0]
    return dataclasses.replace(cell, metadata={**cell.metadata, "server_argv": argv})


def test_the_stored_run_used_dummy_target_weights():
    assert dummy_weights_text(RUN.cells[0], RUN.cells[1]) == "dummy weights: target"


def test_a_draft_inherits_the_target_format_unless_its_own_is_given():
    draft = ["--speculative-draft-model-path", "/m/draft"]
    assert dummy_weights_text(with_argv(["--load-format", "dummy", *draft]), None) \
        == "dummy weights: target and draft"
    assert dummy_weights_text(with_argv([*draft, "--speculative-draft-load-format", "dummy"]), None) \
        == "dummy weights: draft"
    assert dummy_weights_text(with_argv(["--load-format", "dummy", *draft,
                                         "--speculative-draft-load-format", "auto"]), None) \
        == "dummy weights: target"
    assert dummy_weights_text(with_argv(draft), with_argv([])) == ""


def test_a_rate_reads_as_a_ratio_with_its_interval():
    base = Metric("tok_s_c4", Kind.NOISY, (100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1), "tok/s", "higher")
    faster = tuple(v * 1.27 for v in base.values)
    c = compare_noisy(base.values, faster, Floor(relative=0.05))
    text = comparison_text(c, base, dataclasses.replace(base, values=faster))
    assert text.startswith("1.27× faster (95% CI 1.2") and "Δ median" in text, text
    slower = compare_noisy(faster, base.values, Floor(relative=0.05))
    assert ratio_text(slower, dataclasses.replace(base, values=faster)).startswith("1.27× slower")
    plain = dataclasses.replace(base, unit="")
    assert ratio_text(c, plain).startswith("1.27× higher")
    zero = compare_noisy((0.0,) * 8, faster, Floor(relative=0.05))
    assert ratio_text(zero, base) == ""  # no ratio to a median of 0
    tiny = compare_noisy((1e-17,) * 8, (0.05,) * 8, Floor())
    assert ratio_text(tiny, plain) == ""  # nor to one near 0: "5e15× higher" means nothing
    same = compare_noisy(base.values, base.values, Floor(relative=0.05))
    assert ratio_text(same, base) == ""  # "1.00× faster" says nothing


def test_exact_differences_read_in_words_and_singulars_hold():
    one = Metric("hit_fraction", Kind.EXACT, (1.0,), headline="first")
    assert comparison_text(compare_exact((1.0,), (1.0,)), one, one) == "identical"  # one value of the run
    assert comparison_text(compare_exact((1.0,), (0.5,)), one, dataclasses.replace(one, values=(0.5,))) == "1 → 0.5"
    assert compare_exact((1.0,), (1.0,)).note == "identical (1 value)"
    base = Metric("k3", Kind.EXACT, (0.0, 0.0, 0.0), headline="mean")
    cand = dataclasses.replace(base, values=(0.0, 0.006593097613568202, 0.0))
    assert (comparison_text(compare_exact(base.values, cand.values), base, cand, item="prompt")
            == "mean 0 → 0.0022; first at prompt 1: 0 → 0.00659 (1 of 3 prompts differs)")
    both = dataclasses.replace(base, values=(0.5, 0.5, 0.0))
    assert comparison_text(compare_exact(base.values, both.values), base, both, item="prompt").endswith(
        "(2 of 3 prompts differ)")


def test_exact_values_show_the_digits_that_tell_them_apart_and_no_more():
    assert fmt_pair(-16.147974237419657, -16.809261167687428) == ("-16.1", "-16.8")
    assert fmt_pair(0.5, 0.5000001) == ("0.5", "0.5000001")  # no tolerance: never "0.5 → 0.5"
    assert fmt_pair(2.0, 2.0) == ("2", "2")
    base = Metric("swa_peak", Kind.EXACT, (117.0,), unit="tokens", headline="max")
    cand = dataclasses.replace(base, values=(659.0,))
    text = comparison_text(compare_exact(base.values, cand.values), base, cand, item="request",
                           where=lambda i: f"request {i}")
    assert text == "request 0: 117 → 659 tokens"


def cells_of(probe: str, samples: list[dict], cand_samples: list[dict] | None = None) -> tuple[CellResult, ...]:
    return tuple(CellResult(config="c", probe=probe, role=role, revision=RevisionInfo("main", "a" * 40),
                            status=Status.OK, config_fingerprint="f", workload_fingerprint="w", samples=tuple(s))
                 for role, s in ((Role.BASE, samples), (Role.CANDIDATE, cand_samples or samples)))


def test_a_cache_hit_is_named_by_its_workload_prompt_else_by_its_hit_index():
    base = Metric("k3", Kind.EXACT, (0.0, 0.0), headline="mean")
    cand = dataclasses.replace(base, values=(0.0, 0.25))
    comp = ProbeComparison("c", "prefill_cache_hit", Verdict.DIFFERENT, {"k3": compare_exact(base.values, cand.values)})
    hits = [{"prompt": 2, "first_divergent": None}, {"prompt": 5, "first_divergent": 4}]
    cells = cells_of("prefill_cache_hit", hits)
    assert index_item(comp, cells[0], base) == "hit"
    assert (comparison_text(comp.metrics["k3"], base, cand, item="hit", where=value_place("hit", cells, (base, cand)))
            == "mean 0 → 0.125; first at prompt 5, output position 4: 0 → 0.25 (1 of 2 hits differs)")
    older = cells_of("prefill_cache_hit", [{"first_divergent": None}, {"first_divergent": 4}])  # no `prompt`
    assert value_place("hit", older, (base, cand))(1) == "hit 1, output position 4"
    # the two sides' hits were other prompts: both named
    other = cells_of("prefill_cache_hit", hits, [{"prompt": 2, "first_divergent": None}, {"prompt": 6, "first_divergent": 4}])
    assert value_place("hit", other, (base, cand))(1) == "prompt 5 → prompt 6, output position 4"


def k3_cell(role: Role, firsts: tuple[int | None, ...]) -> CellResult:
    """A kl cell whose per-prompt samples say where each answer first departed from its replay."""
    return CellResult(config="det", probe="kl", role=role, revision=RevisionInfo("main", "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      samples=tuple({"k3": 0.0, "first_divergent": f} for f in firsts))


def test_a_differing_prompt_names_the_output_position_where_it_departed():
    base = Metric("k3", Kind.EXACT, (0.0, 0.0, 0.0), headline="mean")
    cand = dataclasses.replace(base, values=(0.0, 0.006593097613568202, 0.0))
    cells = (k3_cell(Role.BASE, (None, None, None)), k3_cell(Role.CANDIDATE, (None, 3, None)))
    where = value_place("prompt", cells, (base, cand))
    assert (comparison_text(compare_exact(base.values, cand.values), base, cand, item="prompt", where=where)
            == "mean 0 → 0.0022; first at prompt 1, output position 3: 0 → 0.00659 (1 of 3 prompts differs)")
    both = (k3_cell(Role.BASE, (5, 2, 4)), k3_cell(Role.CANDIDATE, (5, 7, None)))
    assert [value_place("prompt", both, (base, cand))(i) for i in range(3)] == [
        "prompt 0, output position 5", "prompt 1, output position 2 → 7", "prompt 2, output position 4"]
    # No position without samples one per value, nor for values that are not prompts.
    assert value_place("prompt", (cells[0], None), (base, None))(1) == "prompt 1"
    assert value_place("prompt", cells, (base, dataclasses.replace(cand, values=(0.0,))))(1) == "prompt 1"
    assert value_place("value", cells, (base, cand))(1) == "value 1"


def test_side_notes_both_sides_share_are_left_out_and_the_headline_stays():
    assert without_shared_side_notes("k3 0; gate < 1.00e-09 ✗", "k3 0; gate < 1.00e-09 ✗") == ("k3 0", "k3 0")
    assert without_shared_side_notes("k3 0; gate < 1.00e-09 ✓", "k3 1; gate < 1.00e-09 ✗") == (
        "k3 0; gate < 1.00e-09 ✓", "k3 1; gate < 1.00e-09 ✗")


def test_paths_read_as_the_projects_or_the_revisions_and_never_the_machines(tmp_path):
    (tmp_path / "fixtures" / "refmodels" / "hybrid").mkdir(parents=True)
    assert portable_path("/elsewhere/checkout/fixtures/refmodels/hybrid", tmp_path) == "fixtures/refmodels/hybrid"
    assert portable_path("/tmp/x/detcheck-cache/worktrees/sglang-1a2b/88468dbefa4b/python/sglang/srt/a.py",
                         tmp_path) == "88468dbefa4b:python/sglang/srt/a.py"
    assert portable_path("/data/models/Qwen3-8B", tmp_path) == "…/models/Qwen3-8B"
    # One component names no machine, and is often an HTTP route a log line quotes.
    assert portable_path("/scratch", tmp_path) == "/scratch"
    assert portable('"POST /generate HTTP/1.1" 200; url: /model_info', tmp_path) == \
        '"POST /generate HTTP/1.1" 200; url: /model_info'
    # A URL is left whole (its path is the server's, not this machine's).
    assert portable("on http://127.0.0.1:30000/a/b/c", tmp_path) == "on http://127.0.0.1:30000/a/b/c"
    assert portable("--model-path /data/models/Qwen3-8B --out=/tmp/a/run x/y", tmp_path) == \
        "--model-path …/models/Qwen3-8B --out=…/a/run x/y"


def test_a_reproducers_first_divergence_reads_in_words():
    from harness.report.markdown import divergence_text

    assert divergence_text({"prompt": 0, "position": 5, "what": "cache hit vs cold replay", "side": "candidate",
                            "cached_tokens": 48}) == \
        "prompt 0, position 5 (cache hit vs cold replay, on the candidate, 48 cached tokens)"
    assert divergence_text({"index": 0, "metric": "swa_peak"}) == "swa_peak value 0"
    assert divergence_text({"prompt": 2, "position": 1, "what": "teacher-forced logprob"}) == \
        "prompt 2, position 1 (teacher-forced logprob)"


def _swa_cell(role: Role, plateau: float, retractions: tuple[float, ...] = (0.0,), **kw) -> CellResult:
    return CellResult(config="dspark", probe="swa_peak", role=role, revision=RevisionInfo(role.value, "a" * 40),
                      status=Status.OK, config_fingerprint="f", workload_fingerprint="w",
                      metrics=(Metric("swa_peak", Kind.EXACT, (96.0,)), Metric("swa_plateau", Kind.EXACT, (plateau,)),
                               Metric("retractions", Kind.EXACT, retractions)), **kw)


def _run_of(base: CellResult, cand: CellResult, comp: ProbeComparison):
    from harness.results import RunResult
    return RunResult("s", "refserver", base.revision, cand.revision, (base, cand), (comp,), ())


def test_an_error_row_names_what_changed_without_deciding_once():
    """An error (a deciding metric the candidate lacks) beside a changed plateau: the row
    printed the comparison's note, which names it, and then named it again."""
    from harness.compare import compare_cells
    from harness.probes import PROBES
    from harness.report.rows import rows

    params = PROBES["swa_peak"].validate({"verdict_metrics": ["swa_peak", "retractions"]}, "[probe.swa_peak]")
    base, cand = _swa_cell(Role.BASE, 64.0), _swa_cell(Role.CANDIDATE, 65.0, ())
    comp = compare_cells("dspark", "swa_peak", base, cand, params)
    assert comp.verdict == Verdict.ERROR and comp.changed_not_deciding == ("swa_plateau",)
    (row,) = rows(_run_of(base, cand, comp))
    assert row.note.startswith("retractions measured on the base only"), row.note
    assert row.note.count("changed, not deciding") == 1 and "swa_plateau: " in row.note, row.note


def test_the_top_tables_comparison_column_shows_no_path_of_the_machine():
    from harness.compare import compare_cells
    from harness.paths import PROJECT_ROOT
    from harness.probes import PROBES
    from harness.report.rows import rows

    reason = f"launch failed: no config.json in {PROJECT_ROOT}/fixtures/refmodels/hybrid"
    base = _swa_cell(Role.BASE, 64.0)
    cand = dataclasses.replace(_swa_cell(Role.CANDIDATE, 64.0), status=Status.ERROR, reason=reason, metrics=())
    comp = compare_cells("dspark", "swa_peak", base, cand, PROBES["swa_peak"].defaults())
    (row,) = rows(_run_of(base, cand, comp))
    assert row.note == "candidate: launch failed: no config.json in fixtures/refmodels/hybrid", row.note


def test_a_render_derives_a_cross_revision_probes_metrics_once(monkeypatch, tmp_path):
    """report.md (its rows and its details) and the console table: revision_kl's `across` ran
    once per render, not once for each (three times)."""
    import io

    from harness.probes import PROBES
    from harness.report.emit import emit

    result = read_run(Path(__file__).resolve().parents[1] / "data" / "revision-kl.json")
    kind, calls = PROBES["revision_kl"], []

    def counted(base, cand, params):
        calls.append((base.config, cand.config))
        return kind.across(base, cand, params)

    monkeypatch.setitem(PROBES, "revision_kl", dataclasses.replace(kind, across=counted))
    emit(result, "console", tmp_path, stream=io.StringIO())
    measured = [c for c in result.comparisons if c.probe == "revision_kl" and c.metrics]
    assert measured and len(calls) == len(measured), calls


def test_a_pair_across_a_torch_change_says_so_and_one_on_a_single_torch_does_not():
    """The stored H200 run's sides both ran torch 2.11.0+cu130; its candidate cells moved to
    2.14.1 (a 0.5.21 → 0.5.22 pair) make the report say that differences measure torch too."""
    assert torch_change_text(RUN) is None
    moved = dataclasses.replace(RUN, cells=tuple(
        dataclasses.replace(c, metadata={**c.metadata, "torch": "2.14.1+cu130"}) if c.role == Role.CANDIDATE else c
        for c in RUN.cells))
    sentence = ("The pair spans a torch change (base torch 2.11.0+cu130, candidate torch 2.14.1+cu130): a "
                "difference, revision_kl's above all, measures torch as well as the revision.")
    assert torch_change_text(moved) == sentence
    report = MarkdownReport(moved).render()
    assert report.count("torch change") == 1 and "spans a torch change (base torch 2.11.0+cu130" in report
    assert "torch change" not in MarkdownReport(RUN).render()
