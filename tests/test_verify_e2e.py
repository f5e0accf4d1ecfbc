"""Reproducers verified before they are published, end to end on the reference server: real
processes, real HTTP, a real git repository whose candidates plant

* `softcap-128`, a length-dependent change (logits soft-capped for a sequence of more than 128
  tokens): the samples' cuts (a 2-token score, a 1-token decode) no longer show it, so each row's
  reproducer is grown back to the shortest request that does, and that request, posted by this
  test to fresh servers of each side, still differs while the old cut does not;
* `nan-at-24`, a finding (NaN logprobs from output position 24): one flush and one decode of
  prompt 0 show a number on the base and NaN on the candidate;
* `cache` under the default (noisy) mode: a noisy cache-hit row carries its largest hit's
  requests, verified on the run's servers while they are up.
"""

from __future__ import annotations

import json
import math

import pytest

from conftest import detcheck, refserver_suite
from fresh_servers import checkout, post_reproducer
from harness.fixture_repo import FixtureRepo

pytestmark = pytest.mark.slow

LONG = 128  # softcap-128 caps a sequence longer than this (fixtures/regressions.toml)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    repo = FixtureRepo.create(tmp / "repo")
    revs = {"base": repo.head()}
    for name in ("softcap-128", "nan-at-24", "cache"):
        repo.edit(name)
        revs[name] = repo.commit(f"plant {name}")
        repo.edit(name, undo=True)
        repo.commit(f"undo {name}")
    runs = {}

    def run(candidate: str, suite, *extra: str) -> tuple[dict, str, str]:
        key = (candidate, suite.name, extra)
        if key not in runs:
            out = tmp / f"{candidate}-{suite.stem}-{len(runs)}"
            proc = detcheck("run", "--repo", str(repo.path), "--base", revs["base"], "--candidate", revs[candidate],
                            "--suite", str(suite), "--out", str(out), "--no-progress", "--format", "md", *extra,
                            env={"DETCHECK_CACHE_DIR": str(tmp / "cache")})
            assert proc.returncode == 1, proc.stderr[-3000:]
            runs[key] = (json.loads((out / "results.json").read_text()), proc.stdout, proc.stderr)
        return runs[key]

    return repo, revs, run, tmp


def long_suite(tmp):
    # prompts of 100-110 tokens, 32 generated: the scored sequences pass 128 tokens, their first
    # positions do not
    return refserver_suite(tmp / "long.toml", ["kl", "prefill_cache_hit", "revision_kl"], prompts=2,
                           prompt_len=(100, 110), output_len=32)


def row(result: dict, probe: str) -> dict:
    return next(c for c in result["comparisons"] if c["probe"] == probe)


def cell(result: dict, probe: str, role: str) -> dict:
    return next(c for c in result["cells"] if c["probe"] == probe and c["role"] == role)


def fresh_answers(planted, result: dict, probe: str, rep: dict, candidate: str, label: str) -> dict[str, list]:
    """The reproducer `rep` posted with its curl lines to a fresh server of each side."""
    repo, revs, _, tmp = planted
    return {role: post_reproducer(cell(result, probe, role)["metadata"]["server_argv"],
                                  checkout(repo, revs["base" if role == "base" else candidate],
                                           tmp / f"{label}-{role}"), rep, tmp / f"{label}-{role}.log")
            for role in ("base", "candidate")}


def cut(rep: dict, size: int, key: str) -> dict:
    """The reproducer's requests at another size: its last teacher-forced score's input cut to
    `size` tokens (key "score"), or its decode's max_new_tokens set to `size` ("decode")."""
    requests = []
    for r in rep["requests"]:
        body = r["body"] and json.loads(json.dumps(r["body"]))
        if body and key == "score":
            body["input_ids"] = body["input_ids"][:size]
        elif body and key == "decode" and body["sampling_params"]["max_new_tokens"] > 0:
            body["sampling_params"]["max_new_tokens"] = size
        requests.append({**r, "body": body, "curl": r["curl"].replace(json.dumps(r["body"], separators=(",", ":")),
                                                                     json.dumps(body, separators=(",", ":")))
                         if body else r["curl"]})
    return {**rep, "requests": requests}


def test_a_length_dependent_change_keeps_a_teacher_forced_score_long_enough_to_show_it(planted):
    _, revs, run, tmp = planted
    result, report, _ = run("softcap-128", long_suite(tmp))
    comp = row(result, "revision_kl")
    rep, v = comp["reproducer"], comp["reproducer"]["verification"]
    assert comp["verdict"] == "different" and rep["first_divergent"]["position"] == 1
    # the samples' cut (up to the first divergent position: 2 tokens) was tried first and rejected
    assert v["tried"][0] == [2, False] and v["dimension"] == "scored sequence"
    assert v["reproduced"] == v["attempts"] == 2 and v["size"] == LONG + 1 and not v["budget_ran_out"]
    assert all(shows == (size > LONG) for size, shows in v["tried"])
    (score,) = rep["requests"]
    assert len(score["body"]["input_ids"]) == LONG + 1 and rep["re_measurements"] == v["calls"] == 2 * len(v["tried"])
    assert f"Verified: reproduced 2 of 2 on servers of both sides (relaunched) at scored sequence {LONG + 1}" in report
    # posted by this test to fresh servers: the published request differs, the old cut does not
    published = fresh_answers(planted, result, "revision_kl", rep, "softcap-128", "revkl")
    old = fresh_answers(planted, result, "revision_kl", cut(rep, 2, "score"), "softcap-128", "revkl-old")
    base, cand = (published[r][0]["meta_info"]["input_token_logprobs"] for r in ("base", "candidate"))
    assert base[1][0] != cand[1][0]
    assert "base returned logprob" in rep["expect"] and "at input position 1" in rep["expect"]
    assert old["base"][0]["meta_info"]["input_token_logprobs"] == old["candidate"][0]["meta_info"]["input_token_logprobs"]


@pytest.mark.parametrize("probe", ["kl", "prefill_cache_hit"])
def test_a_length_dependent_change_keeps_a_decode_long_enough_to_show_it(planted, probe):
    """kl and cache hit: the decode (or hit) against its own cold replay. The replay of prompt +
    output is capped once it passes 128 tokens: the samples' 1-token decode does not get there."""
    _, _, run, tmp = planted
    result, _, _ = run("softcap-128", long_suite(tmp))
    comp = row(result, probe)
    rep, v = comp["reproducer"], comp["reproducer"]["verification"]
    j = rep["first_divergent"]["position"]
    assert comp["verdict"] == "different" and rep["first_divergent"]["side"] == "candidate"
    assert v["tried"][0] == [j + 1, False] and v["reproduced"] == v["attempts"] == 2
    answer, replay = rep["requests"][-3], rep["requests"][-1]
    new = answer["body"]["sampling_params"]["max_new_tokens"]
    prompt = len(answer["body"]["input_ids"])
    assert new == v["size"] > j + 1 and prompt + new > LONG >= prompt + new - 1  # the shortest past 128
    assert replay["follows"] == [len(rep["requests"]) - 3, prompt]
    answers = fresh_answers(planted, result, probe, rep, "softcap-128", f"{probe}-long")
    own = {}
    for role, got in answers.items():
        decoded, replayed = got[-3]["meta_info"]["output_token_logprobs"], got[-1]["meta_info"]["input_token_logprobs"]
        own[role] = [d[0] for d in decoded] == [r[0] for r in replayed[prompt:]]
    assert own == {"base": True, "candidate": False}
    old = fresh_answers(planted, result, probe, cut(rep, j + 1, "decode"), "softcap-128", f"{probe}-old")
    for got in old.values():  # the samples' cut: every side's decode equals its replay
        assert got[-3]["meta_info"]["output_token_logprobs"][0][0] == got[-1]["meta_info"]["input_token_logprobs"][-1][0]


def test_a_finding_gets_one_flush_and_one_decode_that_show_a_number_on_the_base_and_nan_on_the_candidate(planted):
    _, _, run, tmp = planted
    suite = refserver_suite(tmp / "nan.toml", ["kl"], prompts=2, output_len=32)
    result, report, _ = run("nan-at-24", suite)
    comp = row(result, "kl")
    rep, v = comp["reproducer"], comp["reproducer"]["verification"]
    assert comp["verdict"] == "different" and cell(result, "kl", "candidate")["status"] == "finding"
    assert rep["first_divergent"] == {"prompt": 0, "position": 24, "what": "non-finite output logprob",
                                      "side": "candidate"}
    flush, decode = rep["requests"]
    assert flush["path"] == "/flush_cache" and decode["body"]["sampling_params"]["max_new_tokens"] == 25
    assert v["tried"] == [[25, True], [25, True]] and v["size"] == 25
    assert v["observed"].startswith("base returned logprob ") and v["observed"].endswith(
        ", candidate NaN at output position 24")
    answers = fresh_answers(planted, result, "kl", rep, "nan-at-24", "nan")
    base, cand = (answers[r][1]["meta_info"]["output_token_logprobs"][24][0] for r in ("base", "candidate"))
    assert math.isfinite(base) and math.isnan(cand)
    assert f"{base:.6g}" in v["observed"] and "Verified: reproduced 2 of 2" in report


def test_a_noisy_cache_hit_row_carries_its_largest_hit_verified_on_the_servers_still_up(planted):
    _, _, run, tmp = planted
    suite = refserver_suite(tmp / "noisy.toml", ["prefill_cache_hit"], prompts=8, prompt_len=(70, 90),
                            output_len=8, deterministic=False)
    result, _, stderr = run("cache", suite)
    comp = row(result, "prefill_cache_hit")
    rep, v = comp["reproducer"], comp["reproducer"]["verification"]
    assert comp["verdict"] == "different" and comp["metrics"]["k3"]["kind"] == "noisy"
    assert v["servers"] == "still up" and v["reproduced"] == v["attempts"] == 2 and "relaunched" not in stderr
    hits = cell(result, "prefill_cache_hit", "candidate")["metrics"]
    k3 = next(m for m in hits if m["name"] == "k3")["values"]
    samples = cell(result, "prefill_cache_hit", "candidate")["samples"]
    assert rep["prompts"] == [samples[k3.index(max(k3))]["prompt"]]
    answers = fresh_answers(planted, result, "prefill_cache_hit", rep, "cache", "noisy")
    gap = {}
    for role, got in answers.items():
        hit, replay = got[2]["meta_info"], got[-1]["meta_info"]
        start = len(replay["input_token_logprobs"]) - len(hit["output_token_logprobs"])
        gap[role] = sum(abs(a[0] - b[0]) for a, b in zip(hit["output_token_logprobs"],
                                                         replay["input_token_logprobs"][start:]))
    assert gap["candidate"] > gap["base"]  # the effect's direction, on fresh servers too


def test_a_budget_too_small_says_it_ran_out_and_keeps_the_shortest_that_showed_it(planted):
    _, _, run, tmp = planted
    result, report, _ = run("softcap-128", long_suite(tmp), "--reproducer-budget", "8", "--fresh")
    comp = row(result, "revision_kl")
    v = comp["reproducer"]["verification"]
    assert v["budget_ran_out"] and v["calls"] <= 8 == v["budget"]
    assert v["size"] > LONG and [v["size"], True] in v["tried"]
    assert "the budget of 8 requests ran out" in report
    # kl's attempt is 8 requests: its samples' cut (1 token) was tried, did not show it, and is
    # not published: the whole request is, unverified
    kl = row(result, "kl")["reproducer"]
    assert kl["verification"]["tried"] == [[1, False]] and kl["verification"]["attempts"] == 0
    assert kl["requests"][1]["body"]["sampling_params"]["max_new_tokens"] == 32
    assert "Not verified on servers (relaunched): the budget of 8 requests ran out" in report


def test_a_re_run_of_stored_cells_verifies_its_reproducers_again_on_relaunched_servers(planted):
    """No verification is carried over from the run that stored the cells: a re-run judges the
    verdicts again from the stored samples and posts each reproducer again, to servers started
    for it (the cells' own servers never start); with --reproducer-budget 0 it starts none."""
    _, _, run, tmp = planted
    first, _, _ = run("softcap-128", long_suite(tmp))  # measured (and verified) once
    result, report, stderr = run("softcap-128", long_suite(tmp), "--slots", "1")  # the same cells, from the store
    assert result["launches"] == [] and all(c["metadata"].get("reused") for c in result["cells"])
    for probe in ("kl", "prefill_cache_hit", "revision_kl"):
        v = row(result, probe)["reproducer"]["verification"]
        assert v["servers"] == "relaunched" and v["reproduced"] == v["attempts"] == 2 and v["calls"] > 0, v
        # the same published size as the run that measured the cells found, found again
        assert v["size"] == row(first, probe)["reproducer"]["verification"]["size"]
    assert "reads different: posting its reproducer to both sides' servers (relaunched)" in stderr
    assert "base reused from the store" in report and "Verified: reproduced 2 of 2 on servers of both sides (relaunched)" in report
    unverified, report, _ = run("softcap-128", long_suite(tmp), "--slots", "1", "--reproducer-budget", "0")
    assert all("verification" not in row(unverified, p)["reproducer"] for p in ("kl", "prefill_cache_hit", "revision_kl"))
    assert "Not verified on servers: built from the stored samples alone" in report
