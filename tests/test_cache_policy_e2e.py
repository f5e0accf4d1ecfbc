"""Cache-hit rows across releases whose /server_info differs (issue 47), on the reference
server's models of them (fixtures/refserver/release.py): whether a cache was there to hit is read
from the hits, not from settings that one release reports raw and another resolved; a change of
the prefix-cache policy between the sides is named in the row."""

from __future__ import annotations

import pytest

from conftest import refserver_suite, run_pair
from harness.fixture_repo import FixtureRepo


def releases(tmp_path, *names: str) -> tuple[FixtureRepo, dict[str, str]]:
    repo = FixtureRepo.create(tmp_path / "repo")
    shas = {}
    for name in names:
        repo.set_release(name)
        shas[name] = repo.commit(f"model SGLang {name}")
    return repo, shas


@pytest.mark.slow
def test_a_cache_the_server_turned_off_is_vacuous_on_both_sides_whatever_server_info_reports(tmp_path):
    """Deterministic flashinfer turns the radix cache off: 0.5.16 reports the raw setting
    (`disable_radix_cache: false`), 0.5.17 the resolved one (true). Both sides measure zero hits
    and read vacuous alike; neither is n/a because of what its /server_info said."""
    repo, shas = releases(tmp_path, "0.5.16", "0.5.17")
    suite = refserver_suite(tmp_path / "suite.toml", ["prefill_cache_hit"], args=("--attention-backend", "flashinfer"))
    env = {"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}
    code, result, _ = run_pair(repo, shas["0.5.16"], shas["0.5.17"], suite, tmp_path / "out", env=env)
    cells = {c["role"]: c for c in result["cells"]}
    assert code == 1 and {c["status"] for c in cells.values()} == {"error"}, cells
    for role, said in (("base", ""), ("candidate", "; /server_info reports disable_radix_cache: the server turned "
                                                   "its cache off")):
        assert "0/2 prompts hit the prefix cache" in cells[role]["reason"], cells[role]
        assert cells[role]["reason"].endswith("cached_tokens=[0, 0]" + said), cells[role]["reason"]


@pytest.mark.slow
def test_a_pair_across_the_rust_prefix_cache_default_names_the_policy_change(tmp_path):
    """0.5.20 → 0.5.22: the candidate's /server_info reports the Rust prefix cache (0.5.21's
    default), in its group of cache settings (0.5.22's shape); the row names the change."""
    repo, shas = releases(tmp_path, "0.5.20", "0.5.22")
    suite = refserver_suite(tmp_path / "suite.toml", ["prefill_cache_hit"], prompt_len=(70, 90))
    env = {"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}
    _, result, _ = run_pair(repo, shas["0.5.20"], shas["0.5.22"], suite, tmp_path / "out", env=env)
    row = result["comparisons"][0]
    facts = {c["role"]: c["facts"].get("cache_policy") for c in result["cells"]}
    assert facts == {"base": "disable_radix_cache=False, page_size=1",
                     "candidate": "disable_radix_cache=False, radix_cache_impl=rust, page_size=1"}, facts
    assert row["note"].startswith("the prefix-cache policy changed between the sides (base disable_radix_cache=False, "
                                  "page_size=1; candidate disable_radix_cache=False, radix_cache_impl=rust, "
                                  "page_size=1): a difference in what hits reuse may be that default, not a "
                                  "regression; "), row


@pytest.mark.slow
def test_the_same_policy_in_two_shapes_of_server_info_names_no_change(tmp_path):
    """0.5.21 reports its cache settings at the top, 0.5.22 in a group: the same policy."""
    repo, shas = releases(tmp_path, "0.5.21", "0.5.22")
    suite = refserver_suite(tmp_path / "suite.toml", ["prefill_cache_hit"], prompt_len=(70, 90))
    env = {"DETCHECK_CACHE_DIR": str(tmp_path / "cache")}
    code, result, _ = run_pair(repo, shas["0.5.21"], shas["0.5.22"], suite, tmp_path / "out", env=env)
    row = result["comparisons"][0]
    assert code == 0 and row["verdict"] == "same" and "policy" not in row["note"], row
