"""What one /generate answer must satisfy on its own, whatever the mode and with no base to
compare with (issue 44): checked on every answer of both sides as the client reads it.

- each top-k list is sorted by logprob, highest first (ties in any order);
- every finite logprob is ≤ 0 (a probability above 1 is no probability);
- at temperature 0 the chosen token is first in its top-k (its logprob is the list's highest);
- as many top-k lists as tokens (the logprobs' count is `client._require_a_logprob_per_token`'s);
- `cached_tokens` is at most the prompt, and right after a `/flush_cache` at most the longest
  prefix the prompt shares with what was sent since (0 for the first request after a flush).

A violation is a ServerFinding naming the request (its answer in the batch, the prompt's length
and first ids) and the position. Null, NaN and inf are not judged here: the probes report them
where they are (probes/common.require_output_logprobs), with the prompt and position.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.errors import ServerFinding

# How many sequences since a flush are kept to bound a later request's cached tokens: past it
# the bound is no longer known, and only "at most the prompt" is checked (a throughput probe
# that never flushes keeps none).
SINCE_FLUSH_CAP = 4096


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _request_words(answer: int, count: int, prompt: Sequence[int]) -> str:
    head = ", ".join(str(t) for t in prompt[:4])
    return f"answer {answer} of {count} (a prompt of {len(prompt)} tokens: [{head}{', …' if len(prompt) > 4 else ''}])"


def topk_order_problem(top: Sequence[tuple[float | None, int]]) -> str:
    """Where a top-k list is not sorted by logprob, highest first ("" where it is); entries
    that are null or NaN are left to the probes' checks."""
    values = [(lp, tok) for lp, tok in top if lp is not None and lp == lp]
    for j in range(1, len(values)):
        if values[j][0] > values[j - 1][0]:
            return (f"entry {j} (token {values[j][1]}, {values[j][0]!r}) ranks above entry {j - 1} "
                    f"(token {values[j - 1][1]}, {values[j - 1][0]!r})")
    return ""


@dataclass(frozen=True)
class Violation:
    check: str
    answer: int
    position: int | None
    words: str

    def sample(self) -> dict[str, Any]:
        return {"check": self.check, "answer": self.answer, "position": self.position, "what": self.words}


def _positions(check: str, answer: int, where: str, rows: Sequence[Sequence[tuple[float | None, int]] | None],
               logprobs: Sequence[float | None]) -> list[Violation]:
    """A top-k row's ordering and every finite logprob's sign, per position."""
    out = []
    for j, lp in enumerate(logprobs):
        if _finite(lp) and lp is not None and lp > 0.0:
            out.append(Violation(f"{check} logprob above 0", answer, j, f"{where} logprob {lp!r} at position {j}"))
    for j, top in enumerate(rows):
        if not top:
            continue
        problem = topk_order_problem(top)
        if problem:
            out.append(Violation(f"{check} top-k not sorted by logprob", answer, j,
                                 f"{where} top-k at position {j} is not sorted by logprob: {problem}"))
        above = [(lp, tok) for lp, tok in top if lp is not None and _finite(lp) and lp > 0.0]
        if above:
            out.append(Violation(f"{check} top-k logprob above 0", answer, j,
                                 f"{where} top-k at position {j} holds token {above[0][1]} at {above[0][0]!r}"))
    return out


def _greedy_first(answer: int, output_ids: Sequence[int], logprobs: Sequence[float | None],
                  rows: Sequence[Sequence[tuple[float | None, int]] | None]) -> list[Violation]:
    """At temperature 0 the token chosen at each position has its top-k's highest logprob."""
    out = []
    for j, (tok, lp, top) in enumerate(zip(output_ids, logprobs, rows)):
        ranked = [(v, t) for v, t in (top or ()) if v is not None and _finite(v)]
        if not ranked or lp is None or not _finite(lp):
            continue
        best = max(ranked)
        if lp < best[0]:
            out.append(Violation("greedy token not first in its top-k", answer, j,
                                 f"at temperature 0 output position {j} chose token {tok} ({lp!r}) while its top-k "
                                 f"ranks token {best[1]} higher ({best[0]!r})"))
    return out


def answer_violations(body: dict[str, Any], prompts: Sequence[Sequence[int]],
                      answers: Sequence[Any], cache_bound: Sequence[int | None]) -> list[Violation]:
    """Every check above on each answer of one /generate call (`answers`: client.Generation),
    `cache_bound[i]` the most tokens answer i may have found cached (None: unknown)."""
    params = body.get("sampling_params") or {}
    # One table for every prompt, or one per prompt (a batch of seeded samples: each its own seed).
    per_prompt = params if isinstance(params, list) else [params] * len(prompts)
    top_k = int(body.get("top_logprobs_num") or 0) if body.get("return_logprob") else 0
    out: list[Violation] = []
    for i, (prompt, gen) in enumerate(zip(prompts, answers)):
        found: list[Violation] = []
        own = per_prompt[i] if i < len(per_prompt) and isinstance(per_prompt[i], dict) else {}
        greedy = own.get("temperature") == 0
        if body.get("return_logprob"):
            out_top = gen.output_top_logprobs if top_k else []
            if top_k and len(out_top) != len(gen.output_ids):
                found.append(Violation("as many top-k lists as tokens", i, None,
                                       f"{len(out_top)} output top-k lists for {len(gen.output_ids)} generated tokens"))
            found += _positions("output", i, "output", out_top, gen.output_logprobs)
            found += _positions("input", i, "input", gen.input_top_logprobs if top_k else [], gen.input_logprobs)
            if greedy and top_k:
                found += _greedy_first(i, gen.output_ids, gen.output_logprobs, out_top)
        cached = gen.cached_tokens
        if cached > len(prompt):
            found.append(Violation("cached_tokens above the prompt", i, None,
                                   f"cached_tokens {cached} for a prompt of {len(prompt)} tokens"))
        elif cache_bound[i] is not None and cached > (bound := cache_bound[i]):
            found.append(Violation("cached_tokens after a flush", i, None,
                                   f"cached_tokens {cached} after /flush_cache, where nothing sent since the flush "
                                   f"shares more than {bound} leading tokens with its prompt"))
        out += [Violation(v.check, v.answer, v.position, f"{_request_words(i, len(prompts), prompt)}: {v.words}")
                for v in found]
    return out


def raise_violations(violations: Sequence[Violation]) -> None:
    """A ServerFinding naming the first violation and how many there are, each in its samples."""
    if not violations:
        return
    first = violations[0]
    more = f" ({len(violations)} such checks failed)" if len(violations) > 1 else ""
    raise ServerFinding(f"/generate {first.words}{more}", tuple(v.sample() for v in violations))


@dataclass
class SinceFlush:
    """What a server was sent since its last `/flush_cache` (None: not flushed by this client, so
    unknown), to bound what a later request can find cached. A call that overlapped another
    (threads sharing the client) gets no bound: the other's tokens may be cached before its
    answer is read here."""

    sequences: list[tuple[int, ...]] | None = None
    started: int = 0
    finished: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def flushed(self) -> None:
        with self.lock:
            self.sequences = []

    def begin(self) -> tuple[int, bool]:
        """(this call's number, whether no other call was in flight as it began)."""
        with self.lock:
            self.started += 1
            return self.started, self.finished == self.started - 1

    def end(self, call: int, alone: bool, prompts: Sequence[Sequence[int]],
            outputs: Sequence[Sequence[int]] | None) -> list[int | None]:
        """Each prompt's bound on its cached tokens, then what this call sent is remembered
        (`outputs` None: the call failed, and what the cache holds is unknown until a flush)."""
        with self.lock:
            self.finished += 1
            alone = alone and self.started == call
            known = self.sequences
            if outputs is None:
                self.sequences = None
                return [None] * len(prompts)
            sent = [tuple(p) + tuple(o) for p, o in zip(prompts, outputs)]
            if known is None or not alone or len(known) + len(sent) > SINCE_FLUSH_CAP:
                bounds: list[int | None] = [None] * len(prompts)
            else:
                bounds = [max((_common_prefix(p, s) for s in (*known, *sent[:i], *sent[i + 1:])), default=0)
                          for i, p in enumerate(prompts)]
            if known is not None:
                self.sequences = known + sent if len(known) + len(sent) <= SINCE_FLUSH_CAP else None
            return bounds
