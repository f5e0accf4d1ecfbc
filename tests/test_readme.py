"""The README is the front door: its two copy-paste commands first, short enough to read."""

from __future__ import annotations

import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_two_commands_come_first_and_the_readme_stays_short():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S).group(1).splitlines()
    assert first_block == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/detcheck demo",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest -q"]
    assert README.index("```sh") < README.index("\n## ")  # before any section
    assert len(README.encode()) < 12 * 1024


def test_every_local_link_of_the_readme_resolves():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert "results/h200/README.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []
