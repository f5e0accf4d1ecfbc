"""Which target a command launches when --target is left out: the one the checkout holds."""

from __future__ import annotations

import pytest

from conftest import detcheck, make_sglang_repo
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
    with pytest.raises(UsageError, match="holds neither python/sglang nor python/refserver: pass --target"):
        chosen_target(None, tmp_path / "c")


@pytest.mark.parametrize("verb", [("run",), ("bisect",), ("matrix", "run")])
def test_help_says_how_the_target_is_chosen(verb):
    text = " ".join(detcheck(*verb, "--help").stdout.split())
    assert ("Default: what --repo holds (python/sglang: sglang" in text
            if verb != ("matrix", "run") else "its target (matrix.toml's `target`" in text), text
