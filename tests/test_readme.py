"""The README is the front door: its two copy-paste commands first, short enough to read."""

from __future__ import annotations

import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_two_commands_come_first_and_the_readme_stays_short():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S).group(1).splitlines()
    assert first_block == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' -c constraints/cpu.txt && .venv/bin/detcheck demo",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' -c constraints/cpu.txt && .venv/bin/python -m pytest -q -n 3"]
    assert README.index("```sh") < README.index("\n## ")  # before any section
    assert len(README.encode()) < 12 * 1024


def test_every_local_link_of_the_readme_resolves():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert "results/h200/README.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_the_sglang_checkout_section_installs_no_torch_and_its_commands_parse():
    """Its commands as printed: each detcheck line is a valid command line of this detcheck, the
    suite it names exists here, and the install into SGLang's environment names no constraints
    file or extra (either would touch SGLang's torch)."""
    import shlex

    from harness.cli import parse

    start = README.index("## On your SGLang checkout")
    section = README[start:README.index("\n## ", start)]
    lines = [block.replace("\\\n", " ") for block in re.findall(r"```sh\n(.*?)```", section, re.S)]
    commands = [shlex.split(line) for block in lines for line in block.splitlines()]
    runs = [argv for argv in commands if argv[0].endswith("/detcheck")]
    assert len(runs) == 2
    for argv in runs:
        args = parse(argv[1:])
        assert args.command == "run" and (ROOT / args.suite).is_file()
    installs = [argv for argv in commands if "install" in argv]
    assert installs == [["~/sglang/.venv/bin/python", "-m", "pip", "install", "-e", "."]]


def test_the_architecture_stays_a_map():
    """Specifications live in docs/; ARCHITECTURE.md names the modules and their layers."""
    assert len((ROOT / "ARCHITECTURE.md").read_bytes()) < 12 * 1024


def test_the_help_says_each_exit_code_as_the_readmes_table_does():
    """`detcheck --help`'s exit codes, each row as the README's begins (Markdown aside)."""
    import harness.cli

    help_rows, code = {}, None
    for line in harness.cli.__doc__.split("Exit codes", 1)[1].splitlines()[1:]:
        if m := re.match(r"^  (\d+)\s+(.*)", line):
            code, help_rows[m.group(1)] = m.group(1), m.group(2)
        elif line.strip() and code:
            help_rows[code] += " " + line.strip()
    readme_rows = dict(re.findall(r"^\| (\d+) \| (.*) \|$", README, re.M))
    assert sorted(help_rows) == sorted(readme_rows) == ["0", "1", "130", "2", "3", "4"]
    for code, text in help_rows.items():
        assert readme_rows[code].replace("*", "").replace("`", "").startswith(text), code


def test_the_help_lists_the_users_commands_only():
    """`bisect-step` is the predicate `bisect` hands to git bisect run: callable, never listed."""
    from harness.cli import build_parser

    text = build_parser().format_help()
    assert "bisect-step" not in text and "==SUPPRESS==" not in text and "  bisect " in text
    assert build_parser().parse_args(["bisect-step", "--session", "s"]).command == "bisect-step"
