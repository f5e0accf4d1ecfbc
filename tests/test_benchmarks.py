"""The benchmarks `nox -s bench` runs stay runnable: each main at its smallest size (figures
are printed, not checked)."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kl  # noqa: E402
import bench_schedule  # noqa: E402


def test_bench_kl_runs_at_a_small_size(capsys):
    bench_kl.main(["2", "64"])
    assert "2 prompts × 64 tokens" in capsys.readouterr().out


@pytest.mark.slow  # reads the committed GPU runs: tens of MB of gzipped JSON
def test_the_committed_gpu_runs_print_their_schedule_figures(capsys):
    runs = sorted(p for p in (ROOT / "results" / "h200" / "validate").iterdir() if p.is_dir())
    # The three suites' runs read as one pool: the wall from the first start to the last finish.
    bench_schedule.print_stored([*(([run], run.name) for run in runs), (runs, "pooled")])
    out = capsys.readouterr().out
    assert all(run.name in out for run in runs) and "harness share" in out
    pooled = next(line.split() for line in out.splitlines() if line.startswith("pooled "))
    assert int(pooled[1]) == sum(len(bench_schedule.read_run(run).launches) for run in runs)


@pytest.mark.slow  # reads the committed GPU runs: tens of MB of gzipped JSON
def test_the_pooled_gpu_run_reads_as_one_pool_over_its_suites(capsys):
    bench_schedule.main(["--stored"])
    out = capsys.readouterr().out
    pooled = next(line.split() for line in out.splitlines() if line.startswith("validate-pool (one pool)"))
    suites = [p for p in (ROOT / "results" / "h200" / "validate-pool").iterdir() if p.is_dir()]
    # Every job of the three suites, and the wall from the pool's first start to its last finish.
    assert len(suites) == 3 and int(pooled[3]) == sum(len(bench_schedule.read_run(s).launches) for s in suites)
    assert float(pooled[5]) >= max(bench_schedule.slowest_job(bench_schedule.read_run(s)) for s in suites)


def test_bench_aa_writes_a_suite_the_design_check_accepts(tmp_path):
    import bench_aa

    from harness.suite import load_suite
    from harness.probes import known_probes

    for at_once in (False, True):
        for window_s in (None, 0.5):
            path = tmp_path / f"aa-{at_once}-{window_s}.toml"
            path.write_text(bench_aa.suite_text(3, at_once, 0.05, window_s))
            suite = load_suite(path, known_probes())
            params = suite.probe_params["throughput"]
            assert len(suite.configs) == 3 and params["sides_at_once"] is at_once
            assert params["window_s"] == window_s


def test_the_side_bias_interval_holds_its_share_and_stays_within_zero_and_one():
    import bench_aa

    low, high = bench_aa.wilson_interval(12, 16)  # the 12 of 16: the interval barely clears 50%
    assert 0.5 < low < 0.75 < high < 0.9
    assert bench_aa.wilson_interval(0, 64)[0] == 0.0 and bench_aa.wilson_interval(64, 64)[1] == 1.0
    assert bench_aa.wilson_interval(32, 64) == pytest.approx((0.3810, 0.6190), abs=1e-4)


@pytest.mark.slow  # reads the committed GPU runs
def test_a_pool_runs_host_cpu_bounds_its_wall_from_below():
    """Busy core-seconds over the launch windows, spread over every core, is a wall no schedule
    beats: each committed pool run's wall is at least that, and its count is its launches'."""
    for dirs, name in bench_schedule.pool_order_runs():
        cpu = bench_schedule.host_cpu(dirs[0].parent.parent / "monitor.txt", dirs)
        figures = bench_schedule.stored(dirs, name)
        assert cpu["cores"] == 16 and cpu["launches"] == figures["jobs"]
        assert 0 < cpu["floor_s"] <= figures["wall"], (name, cpu, figures["wall"])
        assert cpu["per_launch"] == pytest.approx(cpu["cpu_s"] / cpu["launches"])
