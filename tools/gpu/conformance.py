"""SGLang's own KL checks and detcheck's probes against ONE server, side by side.

    python3 tools/gpu/conformance.py --suite SUITE --config NAME --helpers DIR --out DIR
                                        [--target sglang|refserver] [--python PY]

Starts one server of a suite's configuration (the installed package: on the GPU machine
PYTHONPATH=/tmp/site, SGLang 0.5.16 of the kit; `--target refserver` for a dry run on the CPU),
then, on that server and with the same prompts and output length (the suite's workload for each
probe):

- detcheck's `kl`, `prefill_cache_hit` and `decode_cache_hit` probes, run in-process as the
  pipeline runs them;
- SGLang's `kl_test_utils` helpers (decode vs replay, prefill-cache hit, decode-cache hit) and
  `kl_multiturn_utils`' prefill- and decode-cache-hit helpers (Mamba cache assertions when the
  configuration has a track interval), loaded from DIR/sglang/test/ (the installed package's
  own files). Their KL figure (mean over prompts of the mean k3 per prompt) is recorded from
  `compare_kl_divergence`; the pass/fail is SGLang's gate for bit-exact deterministic mode
  (avg < 1e-9), and any assertion they raise (a cache-length check) is kept as it reads.

Writes DIR/conformance.json and DIR/conformance.md (the table) and the server's log. Exit 0 when
every check ran (whatever it found), 1 when the server did not start or a check could not run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.client import SGLangClient  # noqa: E402
from harness.probes import PROBES, ProbeContext  # noqa: E402
from harness.workloads import build, suffix_token  # noqa: E402
from sglang_kl_helpers import loaded  # noqa: E402  (beside this file, as suite_server)
from suite_server import start, write_record  # noqa: E402

PROBE_NAMES = ("kl", "prefill_cache_hit", "decode_cache_hit")
# SGLang's helper for each of detcheck's probes (the same name in both helper files).
HELPER_OF = {"kl": "test_input_output_logprobs_match_helper",
             "prefill_cache_hit": "test_input_output_logprobs_match_prefill_cache_hit_helper",
             "decode_cache_hit": "test_input_output_logprobs_match_decode_cache_hit_helper"}
EXACT = 1e-9  # SGLang's gate for bit-exact deterministic mode (a strict "<")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=Path, required=True)
    p.add_argument("--config", required=True, help="a configuration of the suite (with graph modes: NAME-graphs-off)")
    p.add_argument("--helpers", type=Path, required=True, help="folder holding sglang/test/kl_test_utils.py")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--target", default="sglang", choices=("sglang", "refserver"))
    p.add_argument("--python", default=None, help="the server's interpreter (default: this one)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    started = start(args.suite, args.config, args.target, PROBE_NAMES, args.out / "server.log", args.python)
    suite, config, server, failure = started.suite, started.config, started.server, started.failure
    record = {"suite": str(args.suite), "config": args.config, "target": args.target,
              "argv": started.recorded_argv(), "startup_s": round(server.startup_s, 1), "checks": []}
    if failure is not None:
        record["launch_failure"] = str(failure)
        write(args.out, record)
        print(f"server did not start: {failure}\n{failure.log_tail}", file=sys.stderr)
        return 1
    try:
        client = SGLangClient(server.url, timeout_s=suite.request_timeout_s)
        info = client.server_info()
        record["server_version"] = info.get("version")
        track = config.features.mamba_track_interval
        for name in PROBE_NAMES:
            spec_p = suite.probe_spec(name)
            workload = build(suite.workload.with_overrides(spec_p.params))
            record["checks"].append(detcheck_check(name, client, server, config, workload, spec_p.params, info))
            record["checks"] += sglang_checks(name, args.helpers, server.url, workload, track)
    finally:
        server.stop()
    write(args.out, record)
    print((args.out / "conformance.md").read_text())
    return 0 if all(c.get("error") is None for c in record["checks"]) else 1


def detcheck_check(name, client, server, config, workload, params, info) -> dict:
    row = {"check": name, "by": "detcheck", "prompts": len(workload.prompts), "output_len": workload.output_len}
    t0 = time.time()
    try:
        out = PROBES[name].run(ProbeContext(client=client, server=server, config=config, workload=workload,
                                            params=params, server_info=info))
    except Exception as exc:  # a finding or a vacuous result is what this check found
        return {**row, "error": f"{type(exc).__name__}: {exc}"[:600]}
    values = list(out.metrics[0].values)
    row.update(values=values, mean=sum(values) / len(values) if values else None,
               hit_fraction=out.facts.get("hit_fraction"), seconds=round(time.time() - t0, 1))
    return row


def sglang_checks(name: str, helpers: Path, url: str, workload, track: int | None) -> list[dict]:
    """SGLang's helpers for the same check, on the same prompts and output length."""
    prompts = [list(p) for p in workload.prompts]
    n, new_tokens = len(prompts), workload.output_len
    acc = {"ref": {"kl_div": math.inf}}  # the figure is recorded; the gate is applied below
    rows = []
    suffix = suffix_token(workload.spec)  # the turn-2 suffix detcheck's decode_cache_hit appends
    with loaded(helpers, suffix) as (kl, mt):
        kl.get_input_ids = lambda *a, **kw: [list(p) for p in prompts]
        mt.get_input_ids = kl.get_input_ids
        suffixes = [[[suffix] for _ in prompts]]
        # kl_test_utils' helper of the same name, as SGLang's own tests call it.
        fn = HELPER_OF[name]
        calls = {f"kl_test_utils.{fn}": lambda: getattr(kl, fn)(url, acc, "ref", max_samples=n,
                                                                max_new_tokens=new_tokens)}
        # kl_multiturn_utils' cache-hit helpers, with the Mamba cache assertions where the
        # configuration checkpoints recurrent state.
        if name == "prefill_cache_hit":
            mamba = {"assert_prefill_cached_tokens": mt.make_mamba_prefill_assert(track)} if track else {}
            calls[f"kl_multiturn_utils.{fn}"] = lambda: getattr(mt, fn)(
                url, "ref", math.inf, prefix_input_ids=[p[: len(p) // 2] for p in prompts],
                full_input_ids=prompts, max_new_tokens=new_tokens, **mamba)
        elif name == "decode_cache_hit":
            mamba = {"assert_decode_cached_tokens": mt.make_mamba_decode_assert(track)} if track else {}
            calls[f"kl_multiturn_utils.{fn}"] = lambda: getattr(mt, fn)(
                url, "ref", math.inf, prompts, turn_suffixes=suffixes, max_new_tokens=new_tokens, **mamba)
        for helper, call in calls.items():
            rows.append(run_helper(name, helper, call, (kl, mt), n, new_tokens))
    return rows


def run_helper(name: str, helper: str, call, modules, n: int, new_tokens: int) -> dict:
    """One SGLang helper, its KL figures taken from each `compare_kl_divergence` it makes."""
    seen: list[dict] = []
    originals = [m.compare_kl_divergence for m in modules]

    def recording(input_lps, output_lps, thresholds, model, test_name):
        kls = []
        for i, o in zip(input_lps, output_lps):
            logr = [a - b for a, b in zip(i, o)]
            kls.append(sum(math.exp(x) - 1 - x for x in logr) / len(logr) if logr else 0.0)
        seen.append({"label": test_name, "values": kls, "mean": sum(kls) / len(kls) if kls else None})
        originals[0](input_lps, output_lps, thresholds, model, test_name)

    for m in modules:
        m.compare_kl_divergence = recording
    row = {"check": name, "by": "sglang", "helper": helper, "prompts": n, "output_len": new_tokens}
    try:
        call()
    except AssertionError as exc:  # an assertion of the helper's own (a cache length): what it found
        line = traceback.extract_tb(exc.__traceback__)[-1]
        row["assertion"] = f"{exc or 'assert'} ({Path(line.filename).name}:{line.lineno}: {line.line})"[:600]
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc} ({traceback.extract_tb(exc.__traceback__)[-1].lineno})"[:600]
    finally:
        for m, original in zip(modules, originals):
            m.compare_kl_divergence = original
    if seen:
        row.update(values=seen[-1]["values"], mean=seen[-1]["mean"], comparisons=len(seen),
                   exact_by_sglang_gate=all(s["mean"] is not None and s["mean"] < EXACT for s in seen))
    return row


def write(out: Path, record: dict) -> None:
    lines = [f"Server: `{record['config']}` of `{record['suite']}` ({record['target']} "
             f"{record.get('server_version') or ''}), up in {record['startup_s']} s; every check on this one server.",
             "", "| check | by | helper / probe | prompts × tokens | mean k3 over prompts | max k3 of a prompt | "
             "bit-exact by SGLang's gate (< 1e-9) | notes |", "|---|---|---|---|---|---|---|---|"]
    for c in record["checks"]:
        values = c.get("values") or []
        mean = f"{c['mean']:.3g}" if c.get("mean") is not None else "–"
        peak = f"{max(values):.3g}" if values else "–"
        exact = ("yes" if c["mean"] < EXACT else "no") if c.get("mean") is not None else "–"
        notes = "; ".join(x for x in (
            f"hits {c['hit_fraction']:.0%}" if c.get("hit_fraction") is not None else "",
            f"assertion: {c['assertion']}" if c.get("assertion") else "",
            f"error: {c['error']}" if c.get("error") else "") if x)
        lines.append(f"| {c['check']} | {c['by']} | {c.get('helper', c['check'])} | {c['prompts']} × "
                     f"{c['output_len']} | {mean} | {peak} | {exact} | {notes.replace('|', '/')} |")
    write_record(out, "conformance", record, lines)


if __name__ == "__main__":
    sys.exit(main())
