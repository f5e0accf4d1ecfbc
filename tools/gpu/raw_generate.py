"""Raw `/generate` requests, outside detcheck's probes, to a server started with exactly the
arguments a detcheck run gives a configuration: do null logprobs come from the server or from
the requests detcheck sends?

    python3 tools/gpu/raw_generate.py --suite SUITE --config NAME --repo REPO --ref REF --out DIR
                                         [--target sglang|refserver] [--python PY]

The revision REF of REPO is checked out as a run checks it out (its python/ first on PYTHONPATH).
On the suite's `kl` prompts (the ones detcheck sends), with plain JSON over HTTP:

1. decode: one batched request, greedy, `return_logprob` and no top-k (SGLang's kl_test_utils
   request), then the same with `top_logprobs_num` 8 (what detcheck's kl probe asks);
2. cold replay: cache flushed, prompt + output with `max_new_tokens` 0 and `logprob_start_len` 0.

Counts the null (NaN, as orjson writes it) logprobs per prompt and position; writes
DIR/raw_generate.json (with the first prompt's answer as received) and DIR/raw_generate.md.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_server import command_line, revision_parser, start_at_revision, write_record  # noqa: E402

from harness.workloads import build  # noqa: E402


def post(url: str, path: str, body: dict | None = None, timeout: float = 600) -> Any:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as exc:  # the server's own words, not only the status
        raise RuntimeError(f"{path}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:600]}") from None
    return json.loads(text) if text.strip().startswith(("{", "[")) else text


def nulls(entries: list, key: str) -> list[int]:
    """Positions whose logprob is null (an input's first position has none by definition)."""
    first = 1 if key == "input_token_logprobs" else 0
    return [i for i, e in enumerate(entries or []) if i >= first and (e is None or e[0] is None)]


def variant(name: str, answers: list[dict], key: str, tail: list[int] | None = None) -> dict:
    per = [nulls(a["meta_info"].get(key), key) for a in answers]
    row = {"request": name, "field": key, "prompts": len(answers),
           "prompts_with_nulls": sum(bool(p) for p in per),
           "nulls": sum(len(p) for p in per), "positions": sum(len(a["meta_info"].get(key) or []) for a in answers),
           "first_null": next(([i, p[0]] for i, p in enumerate(per) if p), None)}
    if tail is not None:  # nulls among each prompt's last `tail[i]` positions (the replayed output)
        row["nulls_in_replayed_output"] = sum(
            sum(pos >= len(a["meta_info"].get(key) or []) - t for pos in p) for a, p, t in zip(answers, per, tail))
    return row


def main(argv: list[str] | None = None) -> int:
    args = revision_parser(__doc__).parse_args(argv)
    started, record = start_at_revision(args)
    server = started.server
    record["rows"] = []
    if started.failure is not None:
        write(args.out, record)
        return 1
    try:
        url = server.url
        workload = build(started.suite.workload.with_overrides(started.suite.probe_spec("kl").params))
        prompts = [list(x) for x in workload.prompts]
        greedy = {"temperature": 0.0, "max_new_tokens": workload.output_len, "ignore_eos": True}
        for name, extra in (("decode, logprobs", {}), ("decode, logprobs + top-8", {"top_logprobs_num": 8})):
            post(url, "/flush_cache")
            answers = post(url, "/generate", {"input_ids": prompts, "sampling_params": greedy,
                                              "return_logprob": True, "logprob_start_len": -1, **extra})
            record["rows"].append(variant(name, answers, "output_token_logprobs"))
            if extra:
                record["rows"].append(variant(name, answers, "output_top_logprobs"))
            else:
                outputs = [a["output_ids"] for a in answers]
                record["first_answer"] = answers[0]
        post(url, "/flush_cache")
        replay = post(url, "/generate", {"input_ids": [p + o for p, o in zip(prompts, outputs)],
                                         "sampling_params": {**greedy, "max_new_tokens": 0},
                                         "return_logprob": True, "logprob_start_len": 0})
        record["rows"].append(variant("cold replay", replay, "input_token_logprobs", [len(o) for o in outputs]))
    finally:
        server.stop()
    write(args.out, record)
    print((args.out / "raw_generate.md").read_text())
    return 0


def write(out: Path, record: dict) -> None:
    lines = [f"`{record['config']}` of `{record['suite']}` at {record['ref']}: raw `/generate`, the server's "
             f"arguments those of a detcheck run:", "", f"    {command_line(record)}", "",
             "| request | field | prompts with a null | nulls / positions | first null (prompt, position) | "
             "nulls in the replayed output |", "|---|---|---|---|---|---|"]
    for r in record["rows"]:
        lines.append(f"| {r['request']} | `{r['field']}` | {r['prompts_with_nulls']} of {r['prompts']} | "
                     f"{r['nulls']} / {r['positions']} | {r['first_null'] or '–'} | "
                     f"{r.get('nulls_in_replayed_output', '–')} |")
    write_record(out, "raw_generate", record, lines)


if __name__ == "__main__":
    sys.exit(main())
