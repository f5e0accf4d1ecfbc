"""Hostile input, round 3: per-revision environments, result files, secrets, slots, multi-GPU
entries, bisect sessions, the leftover-server registry and the messages. Each test is one
defect class reproduced; the slow ones start real processes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from conftest import refserver_suite
from harness.capabilities import revision_capabilities
from harness.errors import LaunchError, UsageError
from harness.plan import load_suite
from harness.targets import get_target

# -- 8. messages -------------------------------------------------------------------------


def test_a_full_disk_names_the_file_whose_write_failed(tmp_path, monkeypatch, capsys):
    """ENOSPC as a real write reports it: from the write or the fsync, with no file name."""
    from harness import cli, result_files

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(result_files.os, "fsync", full)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text((Path(__file__).parent / "data" / "demo-cache.json").read_text())
    code = cli.main(["baseline", "populate", "--results", str(run_dir), "--out", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 4 and "No space left on device" in err and str(tmp_path / "b.json") in err, err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.json")]  # no temp file left


def test_a_help_that_hangs_says_it_timed_out_not_an_exit_code(tmp_path):
    hangs = tmp_path / "python"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    with pytest.raises(LaunchError) as caught:
        revision_capabilities(get_target("refserver", str(hangs)), None, None, timeout_s=1)
    assert "timed out after 1 s" in str(caught.value) and "exit code" not in str(caught.value)
    assert caught.value.exit_code is None


def test_a_nested_table_as_a_suite_env_value_is_bad_input(tmp_path):
    suite = refserver_suite(tmp_path / "s.toml", ["kl"])
    suite.write_text(suite.read_text().replace("[workload]", "[server.env]\nNESTED = { a = 1 }\n[workload]", 1))
    with pytest.raises(UsageError, match=r"\[server\]\.env\.NESTED must be a string or a number, not a table"):
        load_suite(suite)
    suite.write_text(suite.read_text().replace("NESTED = { a = 1 }", 'PLAIN = "1"'))
    assert load_suite(suite).server_env == {"PLAIN": "1"}
