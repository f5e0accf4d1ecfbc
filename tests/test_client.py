"""SGLangClient's request ids and /abort_request, against a stub server that records bodies."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.client import Generation, SGLangClient
from harness.errors import ProbeNotApplicable, ServerError, ServerFinding


class Stub:
    """Answers every POST with `answer` (status, JSON body, or raw bytes) and keeps what it was sent."""

    def __init__(self, answer: tuple[int, object]):
        self.answer = answer
        self.received: list[tuple[str, object]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.received.append((self.path, body))
                code, payload = stub.answer
                raw = payload if isinstance(payload, bytes) else b"" if payload is None else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.client = SGLangClient(f"http://127.0.0.1:{self.server.server_address[1]}", timeout_s=5)


@pytest.fixture
def stub():
    made: list[Stub] = []

    def make(answer: tuple[int, object]) -> Stub:
        made.append(Stub(answer))
        return made[-1]

    yield make
    for s in made:
        s.server.shutdown()


def test_abort_sends_the_rid_and_raises_on_an_error_status(stub):
    ok = stub((200, None))  # SGLang 0.5.16 answers an empty 200
    ok.client.abort("a1b2")
    assert ok.received == [("/abort_request", {"rid": "a1b2"})]
    refused = stub((400, {"error": {"message": "no such thing"}}))
    with pytest.raises(ServerError, match=r"^/abort_request: HTTP 400: no such thing$"):
        refused.client.abort("a1b2")


def test_asked_for_logprobs_an_answer_short_of_one_per_token_is_a_finding(stub):
    """SGLang 0.5.16 under forced retraction (H200): 127 logprobs for 128 tokens. A finding that
    says how many, never a length mismatch inside the maths."""
    def answer(tokens: int, logprobs: int) -> dict:
        return {"output_ids": list(range(tokens)),
                "meta_info": {"output_token_logprobs": [[-0.5, t, None] for t in range(logprobs)]}}

    from harness.client import Logprobs
    whole = stub((200, [answer(4, 4), answer(4, 4)]))
    assert [len(g.output_logprobs) for g in whole.client.generate([[1], [2]], max_new_tokens=4,
                                                                   logprobs=Logprobs())] == [4, 4]
    short = stub((200, [answer(4, 4), answer(4, 3)]))
    with pytest.raises(ServerFinding, match=r"returned 3 output logprobs for 4 generated tokens \(answer 1 of 2; 1 such\)"):
        short.client.generate([[1], [2]], max_new_tokens=4, logprobs=Logprobs())
    # Not asked for: nothing to count.
    assert len(stub((200, [answer(4, 0)])).client.generate([1], max_new_tokens=4)) == 1


def test_generate_carries_the_rids_and_reads_an_abort(stub):
    answer = {"output_ids": [5, 6], "meta_info": {"completion_tokens": 2, "finish_reason": {
        "type": "abort", "message": "Aborted", "status_code": None, "err_type": None}}}
    s = stub((200, [answer, answer]))
    (gen, _) = s.client.generate([[1, 2], [3, 4]], max_new_tokens=8, rid=["r0", "r1"])
    assert s.received[0][1]["rid"] == ["r0", "r1"]
    assert gen.aborted and gen.completion_tokens == 2
    assert not Generation((5,), {"finish_reason": {"type": "length", "length": 1}}).aborted


class Hostile:
    """A server that answers /generate as `answer(handler)` writes it: slowly, or without end."""

    def __init__(self, answer):
        self.written = 0  # bytes the answer got out before the client hung up
        self.cut_off = threading.Event()
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    answer(self, hostile)
                except OSError:  # the client gave up
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


TRICKLE_S = 0.2  # far within a read timeout; 600 bytes of it take two minutes


def trickle(handler, hostile, head: bool) -> None:
    body = b'{"output_ids": [1], "meta_info": {}}'.ljust(600)
    head_text = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n" + "X-Pad: " + "x" * 600 + "\r\n\r\n"
    parts = [*head_text.encode(), *body] if head else [*body]
    if not head:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
    try:
        for byte in parts:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(TRICKLE_S)
    except OSError:
        hostile.cut_off.set()  # the client hung up before the answer ended


@pytest.mark.parametrize("head", [False, True], ids=["body", "headers"])
def test_an_answer_trickled_a_byte_at_a_time_is_cut_off_at_the_request_deadline(head):
    hostile = Hostile(lambda handler, _: trickle(handler, hostile, head))
    try:
        # The answer is a valid one: read to its end, it would be taken.
        with pytest.raises(ServerError, match=r"^POST /generate: no answer within 1 s$"):
            SGLangClient(hostile.url, timeout_s=1).generate([1, 2], max_new_tokens=1)
        assert hostile.cut_off.wait(60), "the client read the answer to its end"
    finally:
        hostile.server.shutdown()


def endless(handler, hostile, declared: bool) -> None:
    """256 MiB of JSON whitespace; its size said up front, or not (the answer ends at close)."""
    handler.send_response(200)
    if declared:
        handler.send_header("Content-Length", str(256 * 2**20))
    handler.send_header("Connection", "close")
    handler.end_headers()
    block = b" " * 2**20
    for _ in range(256):
        handler.wfile.write(block)
        hostile.written += len(block)


@pytest.mark.parametrize("declared", [False, True], ids=["unsized", "content-length"])
def test_an_answer_past_the_cap_is_refused_having_read_no_more_than_the_cap(monkeypatch, declared):
    from harness import bounded, client

    monkeypatch.setattr(client, "SERVER_ANSWER", bounded.SizeCap(2**20, "a server's answer"))
    hostile = Hostile(lambda handler, h: endless(handler, h, declared))
    try:
        with pytest.raises(ServerError, match=r"^POST /generate: answer larger than 1 MiB, the most detcheck reads "
                                              r"of a server's answer$"):
            SGLangClient(hostile.url, timeout_s=60).generate([1, 2], max_new_tokens=1)
        time.sleep(0.5)  # the server notices the hang-up
        assert hostile.written < 64 * 2**20  # the cap and the sockets' buffers, not the answer
    finally:
        hostile.server.shutdown()


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def test_generate_stream_yields_each_event_until_done(stub):
    running = {"output_ids": [5], "meta_info": {"completion_tokens": 1, "finish_reason": None}}
    last = {"output_ids": [5, 6], "meta_info": {"completion_tokens": 2, "finish_reason": {"type": "abort"}}}
    s = stub((200, sse(running, last, b"[DONE]", running)))  # nothing after [DONE] is read
    events = list(s.client.generate_stream([1, 2], max_new_tokens=8, rid="r1"))
    assert [(e.completion_tokens, e.aborted) for e in events] == [(1, False), (2, True)]
    # A running event's cumulative ids are not read (O(n²) over a long request); the answer's are.
    assert [e.output_ids for e in events] == [(), (5, 6)]
    (path, body), = s.received
    assert path == "/generate" and body["stream"] is True and body["rid"] == "r1"


def test_generate_stream_raises_on_an_error_event_a_malformed_one_and_a_refusal(stub):
    failing = stub((200, sse({"error": {"message": "out of memory"}})))
    with pytest.raises(ServerError, match=r"^/generate \(stream\): out of memory$"):
        list(failing.client.generate_stream([1], max_new_tokens=2, rid="r"))
    malformed = stub((200, sse(b"{not json")))
    with pytest.raises(ServerError, match="malformed event"):
        list(malformed.client.generate_stream([1], max_new_tokens=2, rid="r"))
    refused = stub((400, {"error": {"message": "streaming is not supported here"}}))
    with pytest.raises(ProbeNotApplicable, match="not supported"):
        list(refused.client.generate_stream([1], max_new_tokens=2, rid="r"))
