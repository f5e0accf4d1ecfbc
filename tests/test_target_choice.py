"""Which target a command launches when --target is left out: the one the checkout holds."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, detcheck, make_sglang_repo, refserver_suite
from harness.commands.common_args import chosen_target
from harness.errors import UsageError
from harness.fixture_repo import FixtureRepo


def test_the_checkout_names_the_target(tmp_path, capsys):
    sglang = make_sglang_repo(tmp_path / "a")
    fixture = FixtureRepo.create(tmp_path / "b" / "refserver").path
    assert chosen_target(None, sglang) == "sglang"
    assert chosen_target(None, fixture) == "refserver"
    assert chosen_target(None, None) == "refserver"  # the installed package: as before
    assert chosen_target("refserver", sglang) == "refserver"  # --target wins
    assert capsys.readouterr().err.splitlines() == [
        "detcheck: target sglang (python/sglang in --repo)",
        "detcheck: target refserver (python/refserver in --repo)",
        "detcheck: target refserver (no --repo)",
        "detcheck: target refserver (--target)"]
    (tmp_path / "c").mkdir()
    with pytest.raises(UsageError, match="holds neither python/sglang nor python/refserver: "
                                         "name the target with --target"):
        chosen_target(None, tmp_path / "c")


def test_a_matrix_entry_that_names_its_target_wins_over_the_checkout(tmp_path, capsys):
    sglang = make_sglang_repo(tmp_path)
    entry = "`target` in matrix.toml's [[entry]] 'cpu'"
    assert chosen_target("refserver", sglang, entry) == "refserver"
    assert chosen_target(None, sglang, entry) == "sglang"
    assert capsys.readouterr().err.splitlines() == [
        "detcheck: target refserver (`target` in matrix.toml's [[entry]] 'cpu')",
        "detcheck: target sglang (python/sglang in --repo)"]
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match=r"name the target with `target` in matrix.toml's \[\[entry\]\] 'cpu'"):
        chosen_target(None, tmp_path / "plain", entry)


@pytest.mark.parametrize("verb", [("run",), ("bisect",), ("matrix", "run")])
def test_help_says_how_the_target_is_chosen(verb):
    text = " ".join(detcheck(*verb, "--help").stdout.split())
    assert "what --repo holds (python/sglang: sglang; python/refserver, a fixture repo: refserver)" in text, text
    if verb == ("matrix", "run"):
        assert "the entry's `target` where it names one, else what --repo holds" in text, text


MATRIX = """
[[entry]]
name = "from-checkout"
suites = ["suite.toml"]

[[entry]]
name = "pinned"
target = "refserver"
suites = ["suite.toml"]
"""


@pytest.mark.slow
def test_matrix_run_takes_the_target_from_the_checkout_unless_the_entry_names_one(tmp_path):
    """One SGLang checkout (its launch_server hands over to the reference server), two entries:
    the one without `target` runs it as sglang, the one with `target = "refserver"` as that."""
    repo = make_sglang_repo(tmp_path)
    (tmp_path / "matrix.toml").write_text(MATRIX)
    refserver_suite(tmp_path / "suite.toml", ["kl"], args=("--random-seed", "7"), targets=("sglang", "refserver"))
    env = {"PYTHONPATH": str(ROOT / "fixtures")}  # where the shim (and the pinned target) find the server
    for entry, target, why in (("from-checkout", "sglang", "python/sglang in --repo"),
                               ("pinned", "refserver", "`target` in matrix.toml's [[entry]] 'pinned'")):
        out = tmp_path / entry
        proc = detcheck("matrix", "run", entry, "--matrix", str(tmp_path / "matrix.toml"), "--repo", str(repo),
                        "--base", "main~1", "--candidate", "main", "--out", str(out), env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"detcheck: target {target} ({why})" in proc.stderr
        assert f"matrix {entry}: suite.toml on target {target}" in proc.stderr
        result = json.loads((out / "suite" / "results.json").read_text())
        assert result["target"] == target
        assert [c["verdict"] for c in result["comparisons"]] == ["same"]


def test_matrix_list_says_which_entries_take_the_checkouts_target(tmp_path):
    (tmp_path / "matrix.toml").write_text(MATRIX)
    (tmp_path / "suite.toml").write_text("")
    listed = detcheck("matrix", "list", "--matrix", str(tmp_path / "matrix.toml"))
    assert listed.returncode == 0, listed.stderr
    targets = {line.split()[0]: line.split()[3] for line in listed.stdout.splitlines()}
    assert targets == {"from-checkout": "checkout", "pinned": "refserver"}
    rows = json.loads(detcheck("matrix", "list", "--matrix", str(tmp_path / "matrix.toml"), "--json").stdout)
    assert {r["name"]: r["target"] for r in rows} == {"from-checkout": None, "pinned": "refserver"}
