"""detcheck history: revisions selected, change points found (and not found in noise), the
demo's 34-commit history with its planted regression found and confirmed, a revision appended
at the cost of one server, a planted noisy slowdown found at its commit with no false change
point in an A/A history of the same length, and the dashboard in a real browser."""

from __future__ import annotations

import dataclasses

import json
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pytest

import browser
from conftest import ROOT, detcheck
from harness.demo import build_demo_history, build_noisy_histories
from harness.errors import UsageError
from harness.fixture_repo import FixtureRepo
from harness.history.changepoints import shifts
from harness.history.dashboard import SCRIPT, render
from harness.history.model import (ChangePoint, Cost, History, Mark, Point, RevisionSelection, Series, Timeline,
                                   select_revisions)

DEMO_SUITE = ROOT / "suites" / "default.toml"
COMMITTED = ROOT / "results" / "history-demo"
NOISY_SUITE = COMMITTED / "throughput.toml"  # what run.sh made the committed noisy dashboards with
# The demo's regression (cache) decides on prefill_cache_hit; 2 prompts keep each revision short.
DEMO_ARGS = ("--suite", str(DEMO_SUITE), "--config", "deterministic", "--probe", "prefill_cache_hit",
             "--set", "prefill_cache_hit.prompts=2")


# -- change points (the maths) --------------------------------------------------------------------

def test_a_step_is_found_at_its_revision_and_noise_is_not():
    rng = np.random.default_rng(7)
    flat = list(500 + 60 * rng.standard_normal(20))
    assert shifts(flat, 0.1) == []
    stepped = flat[:12] + [v / 4 for v in flat[12:]]
    found = shifts(stepped, 0.1)
    assert [s.index for s in found] == [12]
    assert found[0].relative < -0.6


def test_a_heavy_tailed_outlier_is_no_change_point():
    rng = np.random.default_rng(3)
    series = list(100 + 5 * rng.standard_normal(20))
    series[9] = 400.0  # one revision measured while the host was busy elsewhere
    assert shifts(series, 0.1) == []


def test_a_shift_below_the_floor_is_dropped():
    series = [100.0] * 10 + [104.0] * 10
    assert [s.index for s in shifts(series, 0.0)] == [10]
    assert shifts(series, 0.1) == []


# -- which revisions ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_repo(tmp_path_factory):
    repo = FixtureRepo.create(tmp_path_factory.mktemp("revs") / "repo")
    shas = [repo.head(), *(repo.note(f"note {i}") for i in range(1, 6))]
    subprocess.run(["git", "-C", str(repo.path), "tag", "v1", shas[1]], check=True)
    subprocess.run(["git", "-C", str(repo.path), "tag", "-a", "-m", "v2", "v2", shas[4]], check=True)
    return repo.path, shas


def test_revisions_by_range_list_last_and_tags(small_repo):
    path, shas = small_repo
    assert [r.sha for r in select_revisions(path, RevisionSelection(revs=f"{shas[1]}..{shas[4]}"))] == shas[1:5]
    assert [r.sha for r in select_revisions(path, RevisionSelection(revs=f"{shas[0]},{shas[3]}"))] == [shas[0], shas[3]]
    assert [r.sha for r in select_revisions(path, RevisionSelection(last=3))] == shas[3:]
    tagged = select_revisions(path, RevisionSelection(tags=f"{shas[0]}..HEAD"))
    assert [(r.ref, r.sha) for r in tagged] == [("v1", shas[1]), ("v2", shas[4])]


@pytest.mark.parametrize("sel, message", [
    (RevisionSelection(), "name the revisions once"),
    (RevisionSelection(revs="a..b", last=3), "name the revisions once"),
    (RevisionSelection(last=1), "at least 2"),
    (RevisionSelection(revs="HEAD.."), "write A..B"),
    (RevisionSelection(revs="HEAD,HEAD"), "named twice"),
    (RevisionSelection(revs="no-such-ref..HEAD"), "does not resolve"),
])
def test_a_bad_selection_is_a_usage_error(small_repo, sel, message):
    with pytest.raises(UsageError, match=message):
        select_revisions(small_repo[0], sel)


def test_an_out_folder_holding_anything_but_a_history_is_refused(small_repo, tmp_path):
    (tmp_path / "dash").mkdir()
    (tmp_path / "dash" / "notes.txt").write_text("mine")
    proc = detcheck("history", "--repo", str(small_repo[0]), "--last", "2", "--suite", str(DEMO_SUITE),
                    "--out", str(tmp_path / "dash"))
    assert proc.returncode == 2 and "not a history's" in proc.stderr, proc.stderr
    assert (tmp_path / "dash" / "notes.txt").read_text() == "mine"


def test_bad_input_exits_2_with_one_line(small_repo, tmp_path):
    proc = detcheck("history", "--repo", str(small_repo[0]), "--last", "1", "--suite", str(DEMO_SUITE),
                    "--out", str(tmp_path / "dash"))
    assert proc.returncode == 2
    assert "at least 2" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# -- the page (no browser) ------------------------------------------------------------------------

def made_up_history() -> History:
    points = tuple(Point(f"{i:040x}", f"r<{i}>", f"subject {i} & more") for i in range(4))
    marks = (Mark("ok", "first"), Mark("ok", "same", report="pairs/a/report.md"),
             Mark("ok", "different", "k3 differs", f"{1:040x}", "pairs/b/report.md", "pairs/b/r.json", "different",
                  "shown again", "pairs/b/confirm/report.md"), Mark("error"))
    cp = ChangePoint(2, points[2].sha, 100.0, 50.0, -0.5, True, "different", "p=0.03", "pairs/b/confirm/report.md")
    series = Series("tok_s_c2", "tok/s", "higher", ((100.0, 101.0), (99.0, 100.0), (50.0, 51.0), ()), (cp,))
    return History("/r/repo", "/s/suite.toml", "refserver", points,
                   (Timeline("det", "throughput", marks, (series,)),), Cost(3, 0, 2), {"library": "ruptures"})


def test_the_page_escapes_foreign_text_and_links_only_inside_its_folder():
    page = render(made_up_history())
    assert "r&lt;2&gt;" in page and "r<2>" not in page
    assert "subject 1 &amp; more" in page
    hrefs = browser.links(page)
    assert {"pairs/b/report.md", "pairs/b/r.json", "pairs/b/confirm/report.md", "history.json"} <= set(hrefs)
    assert not [h for h in hrefs if "://" in h or h.startswith("/")]
    assert page.count("<svg class=plot") == 2  # the marks and the one noisy series


def test_a_revision_without_evidence_is_a_gap_never_a_pass():
    """An errored revision (or one whose exact figures could not be judged) leaves a history
    that is no pass, however quiet its other revisions (issue 44: exit 0 is earned)."""
    history = made_up_history()
    assert history.gaps() == ["r<3>: det/throughput: error"]
    quiet = dataclasses.replace(history, timelines=(dataclasses.replace(
        history.timelines[0], marks=(Mark("ok", "first"), Mark("ok", "same"), Mark("ok", "same"),
                                     Mark("ok", "unknown", "too few tokens", f"{2:040x}"))),))
    assert quiet.gaps() == ["r<3>: det/throughput: unknown against " + f"{2:040x}"[:12] + " (too few tokens)"]
    whole = dataclasses.replace(quiet, timelines=(dataclasses.replace(
        quiet.timelines[0], marks=(Mark("ok", "first"), *(Mark("ok", "same"),) * 3)),))
    assert whole.gaps() == []


def test_the_feed_holds_the_series_and_their_medians():
    feed = made_up_history().to_dict()
    series = feed["timelines"][0]["series"][0]
    assert series["medians"] == [100.5, 99.5, 50.5, None]
    assert series["change_points"][0]["confirmation"] == "different"
    assert feed["cost"] == {"measured_servers": 3, "reused_revisions": 0, "confirmation_servers": 2}


# -- the demo's 34-commit history, end to end -----------------------------------------------------

def history_cli(repo: Path, revs: str, out: Path, store: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return detcheck("history", "--repo", str(repo), "--revs", revs, "--out", str(out), "--store", str(store),
                    *args, env=env, timeout=1800)


@pytest.fixture(scope="module")
def demo_history(tmp_path_factory):
    """The demo's history (good + 33 commits, an unbuildable one among them), first without its
    last commit, then with it appended."""
    root = tmp_path_factory.mktemp("history-demo")
    h = build_demo_history(root, seed=5)
    env, store = {"DETCHECK_CACHE_DIR": str(root / "cache")}, root / "store"
    first = history_cli(h.path, f"{h.good}..{h.bad}~1", root / "first", store, env, *DEMO_ARGS)
    appended = history_cli(h.path, f"{h.good}..{h.bad}", root / "dash", store, env, *DEMO_ARGS)
    return h, first, appended, root


def feed(out: Path) -> dict:
    return json.loads((out / "history.json").read_text())


@pytest.mark.slow
def test_the_demo_history_finds_the_planted_regression_and_confirms_it(demo_history):
    h, first, appended, root = demo_history
    assert appended.returncode == 1, appended.stdout + appended.stderr
    data = feed(root / "dash")
    assert len(data["points"]) == 34
    shas = [p["sha"] for p in data["points"]]
    (timeline,) = data["timelines"]
    different = [i for i, m in enumerate(timeline["marks"]) if m["verdict"] == "different"]
    assert [shas[i] for i in different] == [h.culprit]
    mark = timeline["marks"][different[0]]
    assert mark["against"] == shas[different[0] - 1]
    assert mark["confirmation"] == "different", mark["confirmation_note"]
    assert "reproducer posted to both revisions' servers" in mark["confirmation_note"]
    # the unbuildable commit is an error mark, stepped over: its neighbours compare with each other
    bad = shas.index(h.unbuildable)
    assert timeline["marks"][bad]["status"] == "error"
    assert timeline["marks"][bad + 1]["against"] == shas[bad - 1]
    assert f"changed at {h.culprit[:12]}" in appended.stdout
    for link in (mark["report"], mark["reproducer"], mark["confirmation_report"]):
        assert (root / "dash" / link).is_file(), link


@pytest.mark.slow
def test_a_history_of_n_revisions_costs_n_servers_and_appending_one_costs_one(demo_history):
    h, first, appended, root = demo_history
    assert first.returncode == 1, first.stdout + first.stderr
    cost = feed(root / "first")["cost"]
    # 33 revisions, one server each but the unbuildable commit's (its `--help` fails: no server)
    assert cost["measured_servers"] == 32, cost
    assert feed(root / "dash")["cost"]["measured_servers"] == 1  # the appended commit alone
    assert feed(root / "dash")["cost"]["reused_revisions"] == 32
    print(f"demo history: 33 revisions -> {cost['measured_servers']} servers; appending 1 -> 1 server; "
          f"confirmation servers {cost['confirmation_servers']}")


# -- noisy series: a planted slowdown and an A/A history, 20 revisions each -----------------------

@pytest.fixture(scope="module")
def noisy_histories(tmp_path_factory):
    root = tmp_path_factory.mktemp("history-noisy")
    h = build_noisy_histories(root, commits=20, planted_at=10)
    env, store = {"DETCHECK_CACHE_DIR": str(root / "cache")}, root / "store"
    aa = history_cli(h.path, ",".join(h.aa), root / "aa", store, env, "--suite", str(NOISY_SUITE))
    planted = history_cli(h.path, ",".join(h.planted), root / "planted", store, env, "--suite", str(NOISY_SUITE))
    return h, aa, planted, root


def series_figures(data: dict) -> list[str]:
    return [f"{s['metric']}: medians {[round(m) for m in s['medians']]}, change points "
            f"{[(cp['index'], round(cp['before']), round(cp['after']), cp['confirmation']) for cp in s['change_points']]}"
            for t in data["timelines"] for s in t["series"]]


@pytest.mark.slow
def test_a_planted_slowdown_is_found_at_its_commit_and_an_aa_history_has_no_confirmed_change(noisy_histories):
    h, aa, planted, root = noisy_histories
    aa_data, planted_data = feed(root / "aa"), feed(root / "planted")
    print("\n".join(["A/A:", *series_figures(aa_data), "planted:", *series_figures(planted_data)]))
    # A/A: no change that a paired run confirms. A candidate the detector finds there (the host's
    # load shifting while the history runs, seen once in this project's runs) is printed above:
    # asserting none at all would test the host's load, not the code.
    aa_series = [s for t in aa_data["timelines"] for s in t["series"]]
    assert aa_series and all(cp["confirmation"] != "different" for s in aa_series for cp in s["change_points"])
    # A change point a paired run did not reject (unknown) is no pass: exit 1, and only then.
    unrejected = [cp for s in aa_series for cp in s["change_points"] if cp["confirmation"] != "same"]
    assert aa.returncode == (1 if unrejected else 0), aa.stdout + aa.stderr
    assert planted.returncode == 1, planted.stdout + planted.stderr
    (timeline,) = planted_data["timelines"]
    headline = next(s for s in timeline["series"] if s["metric"] == "tok_s_c2")
    (cp,) = headline["change_points"]
    assert cp["sha"] == h.culprit and cp["index"] == 10
    # Its paired run decides on two neighbours' rounds alone: on a loaded host it may read unknown
    # (printed above), never same (a rejection) for a slowdown this size.
    assert cp["worse"] is True and cp["confirmation"] in ("different", "unknown"), cp
    # throughput has no exact metric: neighbours measured at different times are never paired
    assert {m["verdict"] for m in timeline["marks"]} == {"first", ""}
    assert not any(m["report"] for m in timeline["marks"])
    # each revision measured once: 20, then the planted history's 10 of its own; 2 to confirm
    assert aa_data["cost"]["measured_servers"] == 20
    assert planted_data["cost"]["measured_servers"] == 10
    assert planted_data["cost"]["confirmation_servers"] == 2


# -- the dashboard in a real browser --------------------------------------------------------------

needs_chromium = pytest.mark.skipif(browser.chromium() is None,
                                    reason="no chromium on PATH (.ci/run installs Debian's where apt can)")


GOOD_PAGE = ("<!DOCTYPE html><html><head><script>{script}</script></head><body>"
             "<svg class=plot width=40 height=20><rect x=1 y=1 width=10 height=10 /></svg>{extra}</body></html>")


@needs_chromium
@pytest.mark.parametrize("script, extra", [
    (SCRIPT + "undefined_fn();", ""),  # an uncaught error
    (SCRIPT, "<a href='pairs/missing/report.md'>report</a>"),  # a link that resolves to nothing
    (SCRIPT, "<img src='https://example.com/x.png'>"),  # something from the network
    ("", ""),  # the plots never counted: the page's script did not run
])
def test_the_browser_check_fails_a_broken_page(tmp_path, script, extra):
    (tmp_path / "index.html").write_text(GOOD_PAGE.format(script=script, extra=extra))
    with pytest.raises(AssertionError):
        check_in_browser(tmp_path)


@needs_chromium
def test_the_browser_check_passes_a_sound_page(tmp_path):
    (tmp_path / "index.html").write_text(GOOD_PAGE.format(script=SCRIPT, extra=""))
    check_in_browser(tmp_path)


def check_in_browser(folder: Path) -> None:
    index = folder / "index.html"
    loaded = browser.load(index)
    assert loaded.console == []
    plots = loaded.dom.count('class="plot"')
    assert plots > 0 and f'data-plots-drawn="{plots}"' in loaded.dom
    for href in browser.links(loaded.dom):
        url = urlparse(href)
        assert not url.scheme and not url.netloc, href  # offline: nothing outside the folder
        if url.path:
            assert (folder / unquote(url.path)).is_file(), href
    anchors = {urlparse(h).fragment for h in browser.links(loaded.dom) if h.startswith("#")}
    assert all(f'id="{a}"' in loaded.dom for a in anchors)


@pytest.mark.slow
@needs_chromium
def test_the_demo_dashboard_loads_offline_draws_its_plots_and_every_link_resolves(demo_history):
    check_in_browser(demo_history[3] / "dash")


@pytest.mark.slow
@needs_chromium
def test_the_noisy_dashboard_loads_offline_draws_its_plots_and_every_link_resolves(noisy_histories):
    check_in_browser(noisy_histories[3] / "planted")


@needs_chromium
def test_the_committed_demo_dashboard_loads_offline(tmp_path):
    """results/history-demo/ as committed: what a reader opens."""
    for name in ("demo", "noisy", "aa"):
        check_in_browser(COMMITTED / name)
