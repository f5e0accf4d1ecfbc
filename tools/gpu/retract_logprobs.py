"""Which generated token loses its logprob under forced retraction? Raw `/generate` requests to
one server of a suite's configuration (started as a detcheck run starts it; the configuration's
`retract_interval` sets SGLANG_TEST_RETRACT / SGLANG_TEST_RETRACT_INTERVAL in its environment).

    python3 tools/gpu/retract_logprobs.py --suite SUITE --config NAME --repo REPO --ref REF --out DIR
                                            [--target sglang|refserver] [--python PY]

On 0.5.16 with forced retraction, detcheck's kl probe got 127 output logprobs for 128 generated
tokens. Here, on the suite's `kl` prompts, each as the kl probe sends them (one batched request,
greedy, `return_logprob`, with and without `top_logprobs_num` 8; three rounds) and once one prompt alone:
per prompt, the number of generated tokens and of output logprobs, and where the logprob entries'
own token ids first stop matching the generated ids (the dropped position: the entry there
carries the next token's id) — with the retraction lines the server logged meanwhile. Writes
DIR/retract_logprobs.json and DIR/retract_logprobs.md.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from raw_generate import post  # noqa: E402
from suite_server import command_line, revision_parser, start_at_revision, write_record  # noqa: E402

from harness.client import parse_prometheus_samples  # noqa: E402
from harness.logparse import retractions  # noqa: E402
from harness.path_proof import RETRACTED  # noqa: E402
from harness.workloads import build  # noqa: E402


def dropped_positions(output_ids: list[int], entries: list) -> list[int]:
    """Generated positions whose logprob entry is missing: walk both lists, an entry whose token
    id is not the generated one at that position is taken as the next position's (a gap)."""
    missing, j = [], 0
    for i, token in enumerate(output_ids):
        if j < len(entries) and entries[j] is not None and entries[j][1] == token:
            j += 1
        else:
            missing.append(i)
    return missing


def retracted_requests(url: str) -> float | None:
    """The server's retracted-requests counter (None where it exports none, or no /metrics at
    all: SGLang without --enable-metrics answers 404)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=60) as resp:
            samples = parse_prometheus_samples(resp.read().decode(errors="replace"))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    values = [value for name, _labels, value in samples if name in RETRACTED]
    return sum(values) if values else None


def per_prompt(answers: list[dict]) -> list[dict]:
    rows = []
    for k, answer in enumerate(answers):
        meta = answer["meta_info"]
        entries = meta.get("output_token_logprobs") or []
        rows.append({"prompt": k, "generated": len(answer["output_ids"]), "logprobs": len(entries),
                     "top_logprobs": len(meta.get("output_top_logprobs") or []),
                     "dropped": dropped_positions(answer["output_ids"], entries),
                     "num_retractions": meta.get("num_retractions"),
                     "cached_tokens": meta.get("cached_tokens"),
                     "finish_reason": meta.get("finish_reason"),
                     "meta_keys": sorted(meta)})
    return rows


def main(argv: list[str] | None = None) -> int:
    args = revision_parser(__doc__).parse_args(argv)
    started, record = start_at_revision(args)
    server, log = started.server, args.out / "server.log"
    record.update(env=started.config.env, requests=[])
    if started.failure is not None:
        write(args.out, record)
        return 1
    try:
        workload = build(started.suite.workload.with_overrides(started.suite.probe_spec("kl").params))
        prompts = [list(x) for x in workload.prompts]
        greedy = {"temperature": 0.0, "max_new_tokens": workload.output_len, "ignore_eos": True}
        # Three rounds of each batch: which prompt is retracted when varies from round to round.
        asked = [(f"batch {r}, logprobs{suffix}", prompts, extra) for r in (1, 2, 3)
                 for suffix, extra in (("", {}), (" + top-8", {"top_logprobs_num": 8}))]
        for name, inputs, extra in (*asked, ("prompt 0 alone, logprobs + top-8", prompts[:1], {"top_logprobs_num": 8})):
            post(server.url, "/flush_cache")
            before = len(retractions(log.read_text(errors="replace")))
            counted = retracted_requests(server.url)
            answers = post(server.url, "/generate", {"input_ids": inputs, "sampling_params": greedy,
                                                     "return_logprob": True, "logprob_start_len": -1, **extra})
            after = len(retractions(log.read_text(errors="replace")))
            now = retracted_requests(server.url)
            record["requests"].append({"request": name, "retraction_lines": after - before,
                                       "retracted_requests_counter": None if now is None or counted is None
                                       else now - counted,
                                       "prompts": per_prompt(answers)})
    finally:
        server.stop()
    record["retraction_lines_total"] = len(retractions(log.read_text(errors="replace")))
    record["testing_retraction_lines"] = log.read_text(errors="replace").count("Testing retraction")
    write(args.out, record)
    print((args.out / "retract_logprobs.md").read_text())
    return 0


def write(out: Path, record: dict) -> None:
    lines = [f"`{record['config']}` of `{record['suite']}` at {record['ref']} (env {record['env']}): raw "
             "`/generate`, the server's arguments those of a detcheck run:", "",
             f"    {command_line(record)}", "",
             "| request | prompt | generated | logprobs | top logprobs | dropped positions | retractions | cached tokens |",
             "|---|---|---|---|---|---|---|---|"]
    for req in record["requests"]:
        for row in req["prompts"]:
            lines.append(f"| {req['request']} | {row['prompt']} | {row['generated']} | {row['logprobs']} | "
                         f"{row['top_logprobs']} | {row['dropped'] or '–'} | {row.get('num_retractions', '–')} | "
                         f"{row.get('cached_tokens', '–')} |")
    lines += ["", "Retractions per request (log lines / the retracted-requests counter): "
              + ", ".join(f"{r['request']}: {r['retraction_lines']} / {r['retracted_requests_counter']}"
                          for r in record["requests"])
              + f"; 'Testing retraction' lines in all: {record.get('testing_retraction_lines', '–')}"]
    write_record(out, "retract_logprobs", record, lines)


if __name__ == "__main__":
    sys.exit(main())
