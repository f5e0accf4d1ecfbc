"""`detcheck selftest`'s registry reading (harness/selftest.py) on SGLang's own layout, and its
verdict per fix: caught only where the control reads same."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.selftest import SelftestRun, markdown, registered_fixes, summary
from harness.verdict_stats import Verdict
from harness.targets import TARGETS

# The shape of SGLang's srt/debug_utils/pr_fix_toggle.py: a patch per PR, then the registry.
SGLANG_TOGGLE = '''
_PR_REVERT_YAML_25015 = """
patches:
  - target: sglang.srt.speculative.eagle_worker.EAGLEWorker.forward_draft_extend
    edits:
      - match: |
          x = 1
"""

_PR_REVERT_YAML_26329 = """
patches: []
"""


_PR_FIX_REVERT_YAML: Dict[int, str] = {
    25015: _PR_REVERT_YAML_25015,
    26329: _PR_REVERT_YAML_26329,
}


def maybe_revert_pr_fix() -> None:
    if pr_num := envs.SGLANG_DEBUG_REVERT_PR.get():
        _revert_pr_fix(pr_num)
'''


def checkout(tmp_path: Path, text: str | None) -> Path:
    target = TARGETS["sglang"]
    module = tmp_path / target.package_dir / target.package / target.fix_toggle
    module.parent.mkdir(parents=True)
    if text is not None:
        module.write_text(text)
    return tmp_path


def test_the_registry_is_read_from_the_revisions_source(tmp_path):
    assert registered_fixes(TARGETS["sglang"], checkout(tmp_path / "a", SGLANG_TOGGLE)) == (25015, 26329)
    assert registered_fixes(TARGETS["sglang"], checkout(tmp_path / "b", None)) == ()
    assert registered_fixes(TARGETS["sglang"], checkout(tmp_path / "c", "x = {1: 2}\n")) == ()


def test_the_reference_servers_registry_is_found_in_its_package():
    """This project's fixtures/refserver is a fixture checkout's python/refserver."""
    root = Path(__file__).resolve().parents[1]
    target = dataclasses.replace(TARGETS["refserver"], package_dir="fixtures")
    assert registered_fixes(target, root) == (9001, 9002, 9003)


def run(fix: int | None, different: tuple[str, ...] = (), same: tuple[str, ...] = ("det/kl", "spec/kl")) -> SelftestRun:
    same = tuple(row for row in same if row not in different)
    verdict = Verdict.DIFFERENT if different else Verdict.SAME if len(same) == 2 else Verdict.ERROR
    return SelftestRun(fix, verdict, Path(f"revert-{fix}"), different, same, 2)


def test_a_fix_counts_as_caught_only_by_a_row_the_control_reads_same():
    runs = [run(1, different=("det/kl",)), run(2), run(3, same=("det/kl",)), run(4, different=("spec/kl",))]
    good = summary(run(None), runs)
    assert [f["caught"] for f in good["fixes"]] == [True, False, False, True]
    assert good["fixes"][0]["caught_by"] == ["det/kl"]
    assert good["caught"] == 2 and good["false_same_rate"] == 2 / 4
    # The control's spec row errs on both sides: a difference there shows nothing, one in det still counts.
    partial = summary(run(None, same=("det/kl",)), runs)
    assert [f["caught"] for f in partial["fixes"]] == [True, False, False, False]
    noisy = summary(run(None, different=("det/kl", "spec/kl")), runs)
    assert noisy["caught"] == 0 and noisy["false_same_rate"] == 1.0


def test_a_revert_whose_candidate_never_served_is_not_applied_and_out_of_the_rate():
    """0.5.16 on the H200: three registered patches no longer match its source, and every
    candidate launch fails; those reintroduce no bug, so they neither miss nor count."""
    unserved = dataclasses.replace(run(5), verdict=Verdict.ERROR, same=(),
                                   not_applied="launch failed: server was killed (PatchApplicationError)")
    result = summary(run(None), [run(1, different=("det/kl",)), run(2), unserved])
    assert [f["caught"] for f in result["fixes"]] == [True, False, False]
    assert result["applied"] == 2 and result["registered"] == 3 and result["false_same_rate"] == 1 / 2
    table = markdown(run(None), [run(1, different=("det/kl",)), run(2), unserved], "0.5.16")
    assert "Caught 1 of 2 applied fixes (3 registered, 1 not applied)" in table, table
    assert "| not applied | the candidate never served: `launch failed: server was killed (PatchApplicationError)`" in table
