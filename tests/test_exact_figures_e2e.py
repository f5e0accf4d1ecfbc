"""Issue 44's regressions that read *same* (or a neutral *n/a*) with exit 0, planted on the reference
server (fixtures/regressions.toml) and read end to end: a capability lost is a change; each answer
is checked against itself; under deterministic mode every exact figure decides. Each test names
what the run now prints; on the harness before issue 44 each of these runs exited 0.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, planted, refserver_suite
from conftest import run_pair as run

pytestmark = pytest.mark.slow


def comparison(result: dict, probe: str, config: str | None = None) -> dict:
    return next(c for c in result["comparisons"] if c["probe"] == probe and config in (None, c["config"]))


def two_configs(path, first: str, probes: list[str], *, output_len: int = 4, prompts: int = 2) -> str:
    """A suite of `first` (a [[config]] table's lines) and a plain configuration that nothing changes,
    each running `probes`: a run whose other row passes."""
    path.write_text(f"""name = "{path.stem}"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[workload]
prompts = {prompts}
prompt_len = [12, 16]
output_len = {output_len}
[[config]]
{first}
probes = {json.dumps(probes)}
[[config]]
name = "plain"
deterministic = true
probes = {json.dumps(probes)}
""")
    return path


def test_a_third_turn_that_reuses_fewer_cached_tokens_reads_different(tmp_path):
    """Every token and logprob identical; the reference probe's later turns (3 and 4) reuse 82% of
    their match (floored to the track interval): before, `cached_tokens` was descriptive (same, exit 0)."""
    repo, base, cand = planted(tmp_path, "later-turn-reuse-less")
    suite = refserver_suite(tmp_path / "s.toml", ["reference"], "mamba_track_interval = 8\n", prompts=2,
                            prompt_len=(40, 48), output_len=32)
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    comp = comparison(result, "reference")
    assert comp["metrics"]["revision_diverging"]["verdict"] == "same", comp
    assert comp["verdict"] == "different" and comp["decided_by"] == "cached_tokens", comp["note"]
    cells = {c["role"]: c for c in result["cells"]}
    turns = {role: [s["cached_tokens"] for s in c["samples"] if s["phase"] == "later_turns"]
             for role, c in cells.items()}
    assert all(c < b for b, c in zip(turns["base"], turns["candidate"])), turns
    earlier = {role: [s["cached_tokens"] for s in c["samples"] if s["phase"] != "later_turns"]
               for role, c in cells.items()}
    assert earlier["base"] == earlier["candidate"], earlier
    assert code == 1 and "cached_tokens" in proc.stdout
    print("later-turn-reuse-less:", comp["note"][:300], turns)


def test_cached_tokens_reported_right_after_a_flush_is_a_finding(tmp_path):
    """The kl probe's decode follows a /flush_cache: its requests report 16 cached tokens on the
    candidate. Before: the kl cell's counter growth 0 → 16 per request sat in a descriptive fact (same, exit 0)."""
    repo, base, cand = planted(tmp_path, "flush-cached-16")
    suite = refserver_suite(tmp_path / "s.toml", ["kl"], prompts=2, prompt_len=(24, 32))
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    comp = comparison(result, "kl")
    cell = next(c for c in result["cells"] if c["role"] == "candidate")
    assert cell["status"] == "finding", cell["reason"]
    assert "cached_tokens 16 after /flush_cache" in cell["reason"] and "answer 0 of 2" in cell["reason"], cell["reason"]
    assert comp["verdict"] == "different" and "cached_tokens 16 after /flush_cache" in comp["note"], comp["note"]
    assert code == 1 and "cached_tokens 16 after /flush_cache" in proc.stdout
    print("flush-cached-16:", comp["note"][:300])


EAGLE = """name = "eagle"
deterministic = true
mamba_track_interval = 16
speculative = { algorithm = "EAGLE", num_steps = 3, eagle_topk = 1, num_draft_tokens = 4 }
probes = ["accept_length"]
[config.draft]
refserver = "%s"
""" % (ROOT / "fixtures/refmodels/hybrid-draft")


def test_acceptance_per_draft_position_that_moved_with_the_mean_unchanged_reads_different(tmp_path):
    """Under deterministic mode the per-position acceptance decides and is shown in report.md and
    on the console; before, `draft_position_accept` sat in results.json only (same, exit 0)."""
    repo, base, cand = planted(tmp_path, "spec-hist-swap")
    suite = tmp_path / "s.toml"
    suite.write_text(f"""name = "s"
[models]
refserver = "{ROOT / 'fixtures/refmodels/hybrid'}"
[workload]
prompts = 4
prompt_len = [40, 90]
output_len = 48
[[config]]
{EAGLE}""")
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out", "--format", "console")
    comp = comparison(result, "accept_length")
    assert comp["metrics"]["accept_length"]["verdict"] == "same", comp
    assert comp["verdict"] == "different" and comp["decided_by"] == "draft_position_accept", comp["note"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "draft_position_accept" in report and "draft_position_accept" in proc.stdout
    assert code == 1
    shares = [c["facts"]["draft_position_accept"] for c in result["cells"]]
    print("spec-hist-swap:", comp["note"][:300], shares)


def test_a_candidate_that_refuses_at_boot_what_the_base_serves_reads_different(tmp_path):
    """Before: the det row read n/a (JUnit skipped), the plain row same: exit 0."""
    repo, base, cand = planted(tmp_path, "refuse-deterministic")
    suite = two_configs(tmp_path / "s.toml", 'name = "det"\ndeterministic = true', ["kl"], prompts=8)
    # the plain configuration off deterministic mode, which the candidate still serves
    suite.write_text(suite.read_text().replace('name = "plain"\ndeterministic = true',
                                               'name = "plain"\ndeterministic = false'))
    junit = tmp_path / "junit.xml"
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out", "--junit-xml", str(junit))
    det = comparison(result, "kl", "det")
    assert det["verdict"] == "different", det
    assert det["note"].startswith("capability lost: the base serves this, the candidate refuses it") and \
        "not supported" in det["note"], det["note"]
    case = next(c for c in ET.parse(junit).getroot() if c.get("classname") == "det")
    assert case.find("skipped") is None and case.find("failure") is not None
    assert code == 1 and "capability lost" in proc.stdout
    print("refuse-deterministic:", det["note"][:300])


def test_a_candidate_whose_help_lost_a_flag_the_configuration_needs_reads_different(tmp_path):
    """old-spelling: the candidate's --help lacks --mamba-radix-cache-strategy and the lazy choice.
    Before: the lazy row read n/a, the plain row same: exit 0."""
    repo, base, cand = planted(tmp_path, "old-spelling")
    suite = two_configs(tmp_path / "s.toml", 'name = "lazy"\ndeterministic = true\nmamba_pool = "lazy"', ["kl"])
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    lazy = comparison(result, "kl", "lazy")
    assert lazy["verdict"] == "different" and lazy["note"].startswith("capability lost"), lazy
    assert comparison(result, "kl", "plain")["verdict"] == "same"
    assert code == 1 and "capability lost" in proc.stdout
    print("old-spelling:", lazy["note"][:300])


def test_a_decode_top_k_in_token_id_order_off_deterministic_mode_is_a_finding(tmp_path):
    """The same tokens and values, sorted by token id: before, off deterministic mode nothing
    judged the order (same, exit 0). Each answer's top-k is checked against itself, in any mode."""
    repo, base, cand = planted(tmp_path, "topk-by-id")
    suite = refserver_suite(tmp_path / "s.toml", ["kl"], deterministic=False, prompts=8, output_len=6)
    code, result, proc = run(repo, base, cand, suite, tmp_path / "out")
    comp = comparison(result, "kl")
    cell = next(c for c in result["cells"] if c["role"] == "candidate")
    assert cell["status"] == "finding" and "top-k at position" in cell["reason"] and \
        "is not sorted by logprob" in cell["reason"], cell["reason"]
    assert comp["verdict"] == "different", comp
    assert code == 1 and "not sorted by logprob" in proc.stdout
    print("topk-by-id:", comp["note"][:300])
