"""The SGLang native HTTP API, as the probes use it.

Both SGLang and the reference server speak it. Every response is checked for shape here so
probes never index into a malformed reply; failures raise ServerError with the reason.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Generator, Iterator, Sequence, TypeGuard

from harness.answer_checks import SinceFlush, answer_violations, raise_violations
from harness.bounded import SERVER_ANSWER, TooLarge
from harness.errors import ProbeNotApplicable, ServerError, ServerFinding
from harness.httpcall import Answer, AnswerBrokenOff, ConnectionFailed, DeadlinePassed, call, open_stream

# SGLang answers a request it cannot serve with 400 and a sentence; these say "cannot", not "broken".
_UNSUPPORTED = re.compile(r"does not support|not supported|unsupported|not yet compatible", re.I)


class ConnectionLost(ServerError):
    """The connection failed or broke off mid-answer: often the server is dying."""


def _logprob(entry: Any) -> float | None:
    """The value of one `[logprob, token_id, text]` entry; None where SGLang sends null (the
    first requested input position) or the entry is not of that form."""
    if not isinstance(entry, (list, tuple)) or not entry or entry[0] is None:
        return None
    try:
        return float(entry[0])
    except (TypeError, ValueError):
        return None


def _number(meta: dict[str, Any], key: str, kind: type) -> Any:
    value = meta.get(key)
    if value is None:
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Logprobs:
    """Ask /generate for logprobs: of the output only (start_len -1), or of the input from
    position start_len on too; top_k > 0 adds the top-k alternatives at every position."""

    start_len: int = -1
    top_k: int = 0


OUTPUT_LOGPROBS = Logprobs()


@dataclass(frozen=True)
class Generation:
    """One /generate answer, reduced to what probes read."""

    output_ids: tuple[int, ...]
    meta: dict[str, Any]

    @property
    def output_logprobs(self) -> list[float | None]:
        return [_logprob(e) for e in self.meta.get("output_token_logprobs") or []]

    @property
    def input_logprobs(self) -> list[float | None]:
        """With `logprob_start_len` s: L - s entries, the first None (SGLang 0.5.16)."""
        return [_logprob(e) for e in self.meta.get("input_token_logprobs") or []]

    # SGLang 0.5.16 writes the spec_* keys only for a request that had a verify round: on a
    # speculative server their absence means 0 rounds, not "no speculative decoding".
    @property
    def spec_verify_ct(self) -> int | None:
        """Verify rounds; None when meta_info has no `spec_verify_ct`."""
        return _number(self.meta, "spec_verify_ct", int)

    @property
    def spec_accept_length(self) -> float | None:
        """Completion tokens per verify round (bonus included); None when absent."""
        return _number(self.meta, "spec_accept_length", float)

    @property
    def spec_accept_rate(self) -> float | None:
        return _number(self.meta, "spec_accept_rate", float)

    @property
    def spec_correct_drafts_histogram(self) -> list[int] | None:
        """Verify rounds by their number of correct drafts (index c: rounds with c correct);
        None when absent or not a list of counts."""
        value = self.meta.get("spec_correct_drafts_histogram")
        if not isinstance(value, list) or not all(isinstance(n, int) and n >= 0 for n in value):
            return None
        return list(value)

    @property
    def output_top_logprobs(self) -> list[list[tuple[float | None, int]] | None]:
        """Per generated token, the top-k (logprob, token id) pairs (with top_logprobs_num);
        None (or a None logprob) where a broken server answered null."""
        return [None if e is None else _top_pairs(e) for e in self.meta.get("output_top_logprobs") or []]

    @property
    def input_top_logprobs(self) -> list[list[tuple[float | None, int]] | None]:
        """Per prompt position, the top-k (logprob, token id) pairs; None where SGLang has none
        (position 0 when logprob_start_len=0)."""
        return [None if e is None else _top_pairs(e) for e in self.meta.get("input_top_logprobs") or []]

    @property
    def cached_tokens(self) -> int:
        return int(self.meta.get("cached_tokens", 0) or 0)

    @property
    def aborted(self) -> bool:
        """The request ended by an abort: asked for (/abort_request) or the server's own."""
        reason = self.meta.get("finish_reason")
        return isinstance(reason, dict) and reason.get("type") == "abort"

    @property
    def completion_tokens(self) -> int:
        return int(self.meta.get("completion_tokens", len(self.output_ids)))


@contextlib.contextmanager
def _failures(method: str, path: str, seconds: float) -> Iterator[None]:
    """httpcall's failures as the client's: a deadline or a cap is the server's fault (an
    error), a connection that fails or breaks off is likely a dying server (ConnectionLost)."""
    try:
        yield
    except DeadlinePassed:
        raise ServerError(f"{method} {path}: no answer within {seconds:.0f} s") from None
    except ConnectionFailed as exc:
        raise ConnectionLost(f"{method} {path}: connection failed ({exc})") from None
    except AnswerBrokenOff as exc:  # e.g. the body ends before its Content-Length
        raise ConnectionLost(f"{method} {path}: answer broken off ({exc})") from None
    except TooLarge as exc:
        raise ServerError(f"{method} {path}: answer {exc}") from None


def _check_generate_status(resp: Answer, what: str) -> None:
    """A /generate answer that is not 200: n/a where SGLang says it cannot serve it, else broken."""
    if resp.status_code == 400 and _UNSUPPORTED.search(resp.text):
        raise ProbeNotApplicable(_error_message(resp))
    if resp.status_code != 200:
        raise ServerError(f"{what}: HTTP {resp.status_code}: {_error_message(resp)}")


# A streamed event's meta_info key. Inside a JSON string a quote is escaped, so the key cannot
# appear in a value (the text, say): its first match is the event's own.
_META_KEY = re.compile(r'"meta_info"\s*:\s*')
_DECODER = json.JSONDecoder()


def _stream_event(payload: bytes) -> Generation:
    """One `data:` event of a streamed /generate, checked for shape. A running event's output ids
    are not read: they are cumulative, so reading every event's would cost the client O(n²) over
    an n-token request (32k tokens in the GPU suites' windows), and only its `completion_tokens`
    counts; the last event (with a finish reason) is read whole, as the answer."""
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        raise ServerError(f"/generate (stream): malformed event {payload[:120]!r}") from None
    meta = _running_meta(text)
    if meta is not None:
        return Generation((), meta)
    try:
        item = json.loads(text)
    except json.JSONDecodeError:
        raise ServerError(f"/generate (stream): malformed event {payload[:120]!r}") from None
    if isinstance(item, dict) and "error" in item:
        err = item["error"]
        raise ServerError(f"/generate (stream): {err.get('message') if isinstance(err, dict) else err}")
    if not isinstance(item, dict) or "meta_info" not in item or "output_ids" not in item:
        raise ServerError(f"/generate (stream): event lacks output_ids/meta_info: {str(item)[:120]}")
    return Generation(tuple(int(t) for t in item["output_ids"]), item["meta_info"])


def _running_meta(text: str) -> dict[str, Any] | None:
    """A running event's meta_info, decoded alone; None for any other event (the last, an error,
    a shape not known here): those are decoded whole."""
    key = _META_KEY.search(text)
    if key is None:
        return None
    try:
        meta, _ = _DECODER.raw_decode(text, key.end())
    except json.JSONDecodeError:
        return None
    running = isinstance(meta, dict) and meta.get("finish_reason") is None and "completion_tokens" in meta
    return meta if running else None


def _top_pairs(entries: list) -> list[tuple[float | None, int]]:
    # SGLang's entries are [logprob, token_id, text] triples (text None unless detokenized); a
    # broken server answers null logprobs here too (0.5.17's unified pool): kept as None for the
    # probe to report, never a crash of the parse.
    return [(None if e[0] is None else float(e[0]), int(e[1])) for e in entries]


def _require_a_logprob_per_token(answers: Sequence[Generation]) -> None:
    """Asked for logprobs, every answer has one per generated token, or a ServerFinding that
    says on how many answers and by how much: a probe that paired a short list with its replay
    would otherwise fail inside the maths (SGLang 0.5.16 under forced retraction on the H200
    answered 127 logprobs for 128 tokens, on both sides)."""
    short = [{"answer": i, "output_tokens": len(g.output_ids), "output_logprobs": len(g.output_logprobs)}
             for i, g in enumerate(answers) if len(g.output_logprobs) != len(g.output_ids)]
    if short:
        first = short[0]
        raise ServerFinding(f"/generate returned {first['output_logprobs']} output logprobs for "
                            f"{first['output_tokens']} generated tokens (answer {first['answer']} of "
                            f"{len(answers)}; {len(short)} such)", tuple(short))


def _prompts(body: dict[str, Any]) -> list[list[int]]:
    """The prompts of a /generate body by input ids, one per answer (none for a text body)."""
    ids = body.get("input_ids")
    if not isinstance(ids, list) or not ids:
        return []
    return [list(p) for p in ids] if is_batch(ids) else [list(ids)]


def is_batch(input_ids: Sequence[int] | Sequence[Sequence[int]]) -> TypeGuard[Sequence[Sequence[int]]]:
    """Whether `input_ids` is a list of prompts (a batch), not one prompt."""
    return bool(input_ids) and isinstance(input_ids[0], (list, tuple))


def generate_body(input_ids: Sequence[int] | Sequence[Sequence[int]], *, max_new_tokens: int,
                  temperature: float = 0.0, ignore_eos: bool = True, logprobs: Logprobs | None = None,
                  sampling_seed: int | None = None) -> dict[str, Any]:
    """The /generate JSON body of one request (a batch when given a list of prompts): what the
    probes send, and what a reproducer hands a reviewer."""
    params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "temperature": temperature,
                              "ignore_eos": ignore_eos}
    if sampling_seed is not None:
        params["sampling_seed"] = sampling_seed
    body: dict[str, Any] = {
        "input_ids": [list(p) for p in input_ids] if is_batch(input_ids) else list(input_ids),
        "sampling_params": params,
    }
    if logprobs is not None:
        body.update(return_logprob=True, logprob_start_len=logprobs.start_len,
                    top_logprobs_num=logprobs.top_k)
    return body


@dataclass
class SGLangClient:
    base_url: str
    # How long one request may take, its whole answer read (the suite's request_timeout_s); a
    # flush is retried as long.
    timeout_s: float = 300.0
    flush_backoff_s: float = 0.25
    # What was sent since the last flush: bounds what a request can find cached (answer_checks).
    since_flush: SinceFlush = field(default_factory=SinceFlush, repr=False)

    def _request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Answer:
        seconds = timeout or self.timeout_s
        with _failures(method, path, seconds):
            return call(method, self.base_url + path, body, seconds, SERVER_ANSWER)

    def _json(self, resp: Answer, what: str) -> Any:
        try:
            return resp.json()
        except (json.JSONDecodeError, ValueError):
            raise ServerError(f"{what}: malformed JSON (HTTP {resp.status_code}, "
                              f"{len(resp.content)} bytes: {resp.text[:120]!r})") from None

    def generate(self, input_ids: Sequence[int] | Sequence[Sequence[int]], *,
                 max_new_tokens: int, temperature: float = 0.0, ignore_eos: bool = True,
                 logprobs: Logprobs | None = None, sampling_seed: int | None = None,
                 rid: str | Sequence[str] | None = None) -> list[Generation]:
        """One request, or a batch when given a list of prompts; always returns a list.
        `rid` names the request for `abort` (a batch: one per prompt; SGLang 0.5.16 makes a
        string into `<rid>_<i>`). SGLang aborts every request whose rid *starts with* the
        one given, so rids should not be prefixes of one another."""
        body = generate_body(input_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                             ignore_eos=ignore_eos, logprobs=logprobs, sampling_seed=sampling_seed)
        if rid is not None:
            body["rid"] = rid if isinstance(rid, str) else list(rid)
        return self.generate_from(body, len(input_ids) if is_batch(input_ids) else 1)

    def generate_from(self, body: dict[str, Any], expected: int = 1) -> list[Generation]:
        """A /generate body as built (`generate_body`: a reproducer's request), its `expected`
        answers read as `generate` reads them."""
        prompts, out = _prompts(body), None
        call_number, alone = self.since_flush.begin()
        try:
            out = self._answers(self._request("POST", "/generate", body), expected)
        finally:  # a call that failed may still have filled the cache: what it holds is unknown then
            bounds = self.since_flush.end(call_number, alone, prompts,
                                          None if out is None else [g.output_ids for g in out])
        if body.get("return_logprob"):
            _require_a_logprob_per_token(out)
        # Whatever each answer must satisfy on its own (issue 44): a finding naming the request.
        if len(prompts) == len(out):
            raise_violations(answer_violations(body, prompts, out, bounds))
        return out

    def _answers(self, resp: Answer, expected: int) -> list[Generation]:
        _check_generate_status(resp, "/generate")
        data = self._json(resp, "/generate")
        items = data if isinstance(data, list) else [data]
        if len(items) != expected:
            raise ServerError(f"/generate: expected {expected} answers, got {len(items)}")
        out = []
        for item in items:
            if not isinstance(item, dict) or "meta_info" not in item or "output_ids" not in item:
                raise ServerError(f"/generate: answer lacks output_ids/meta_info: {str(item)[:120]}")
            # A null output logprob is kept as None: the probes say, as a finding, on how many
            # prompts and where (harness.probes.common.require_output_logprobs).
            out.append(Generation(tuple(int(t) for t in item["output_ids"]), item["meta_info"]))
        return out

    def generate_stream(self, input_ids: Sequence[int], *, max_new_tokens: int, rid: str,
                        temperature: float = 0.0, ignore_eos: bool = True) -> Generator[Generation, None, None]:
        """One prompt with `"stream": true`: each server-sent event as it arrives, the answer so
        far (SGLang 0.5.16 without --stream-output: cumulative output ids, `completion_tokens`
        so far, `finish_reason` null until the last); the output ids only on the last event
        (`_stream_event`). Closing the iterator early closes the connection, which SGLang
        takes as an abort. A `{"error": ...}` event (SGLang's way of
        failing mid-stream) raises ServerError."""
        body = generate_body(input_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                             ignore_eos=ignore_eos)
        body.update(rid=rid, stream=True)
        what = "/generate (stream)"
        # Its tokens reach the cache unseen here: no later request gets a bound until a flush.
        call_number, _ = self.since_flush.begin()
        with contextlib.ExitStack() as stack, _failures("POST", what, self.timeout_s):
            stack.callback(self.since_flush.end, call_number, False, [], None)
            stream = open_stream("POST", self.base_url + "/generate", body, self.timeout_s)
            with contextlib.closing(stream):
                if stream.status_code != 200:
                    _check_generate_status(stream.whole(SERVER_ANSWER), what)
                for line in stream.lines(SERVER_ANSWER):
                    if not line.startswith(b"data:"):
                        continue  # the blank line between events
                    payload = line[len(b"data:"):].strip()
                    if payload == b"[DONE]":
                        return
                    yield _stream_event(payload)

    def abort(self, rid: str) -> None:
        """Abort the request `rid` while it is being served, with every request whose rid
        starts with it (SGLang 0.5.17, /abort_request; a rid already answered, or a batch's
        parent rid, aborts nothing). The server answers 200 whether or not one matched; each
        pending /generate then answers 200 with its tokens so far and `finish_reason` of type
        "abort" (`Generation.aborted`)."""
        resp = self._request("POST", "/abort_request", {"rid": rid}, timeout=30)
        if resp.status_code != 200:
            raise ServerError(f"/abort_request: HTTP {resp.status_code}: {_error_message(resp)}")

    def flush_cache(self) -> None:
        """Flush, retrying with backoff while the server reports in-flight requests (400): a
        request the client gave up on may still run, for at most one request timeout."""
        deadline = time.monotonic() + self.timeout_s
        delay, tries = self.flush_backoff_s, 0
        while True:
            resp = self._request("POST", "/flush_cache")
            tries += 1
            if resp.status_code == 200:
                self.since_flush.flushed()
                return
            if resp.status_code != 400:
                raise ServerError(f"/flush_cache: HTTP {resp.status_code}: {resp.text[:200]}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerError(f"/flush_cache: still busy after {tries} tries over "
                                  f"{self.timeout_s:.0f} s: {resp.text[:200]}")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 5.0)

    def configure_dumper(self, **config: Any) -> None:
        """SGLang's tensor dumper reconfigured at run time (`POST /dumper/configure`, served on
        the server's own port when it started with DUMPER_SERVER_PORT=reuse), e.g. enable=True."""
        resp = self._request("POST", "/dumper/configure", config, timeout=30)
        if resp.status_code != 200:
            raise ServerError(f"/dumper/configure: HTTP {resp.status_code}: {_error_message(resp)}")

    def server_info(self) -> dict[str, Any]:
        # /server_info is the current name; older revisions only have /get_server_info.
        for path in ("/server_info", "/get_server_info"):
            resp = self._request("GET", path, timeout=30)
            if resp.status_code == 200:
                return self._json(resp, path)
        raise ServerError(f"server info: HTTP {resp.status_code}")

    def metrics(self) -> dict[str, float]:
        """Prometheus gauges/counters named sglang:*, summed over label sets; {} when disabled."""
        text = self.metrics_text()
        return parse_prometheus(text) if text is not None else {}

    def metrics_text(self) -> str | None:
        """The `/metrics` exposition as served; None when disabled (not 200)."""
        resp = self._request("GET", "/metrics", timeout=30)
        return resp.text if resp.status_code == 200 else None


# A label block may hold `}` (or `,`, escaped quotes) inside quoted values, and SGLang 0.5.16
# labels every scheduler metric (model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, and
# dp_rank under data parallelism); an optional timestamp may follow the value.
_LABEL_VALUE = r'"(?:[^"\\]|\\.)*"'
_PROM_LINE = re.compile(r"^(sglang:[A-Za-z0-9_:]+)\s*(\{(?:[^\"}]|" + _LABEL_VALUE + r")*\})?"
                        r"\s+(\S+)(?:\s+-?\d+)?\s*$")
_PROM_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(' + _LABEL_VALUE + r')')


def _unescape(quoted: str) -> str:
    return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), quoted[1:-1])


def parse_prometheus_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every `sglang:*` sample as (name, labels, value), e.g. to split gauges by dp_rank."""
    out = []
    for line in text.splitlines():
        m = _PROM_LINE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _PROM_LABEL.findall(m.group(2) or "")}
        out.append((m.group(1), labels, value))
    return out


def parse_prometheus(text: str) -> dict[str, float]:
    """`sglang:*` samples summed over label sets (DP ranks, cache sources, ...)."""
    out: dict[str, float] = {}
    for name, _, value in parse_prometheus_samples(text):
        out[name] = out.get(name, 0.0) + value
    return out


def _error_message(resp: Answer) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if "message" in data:
            return str(data["message"])
        if isinstance(err, str):
            return err
    return resp.text[:300]
