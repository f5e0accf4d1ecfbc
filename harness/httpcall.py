"""One HTTP request under a wall-clock deadline, its answer read up to a cap (whole, or as a
stream of lines).

A socket timeout bounds each read, not the request: a server that sends one byte a second
(headers or body) is never cut off by one. Here a timer started with the request shuts the
socket down at the deadline, whatever the request is waiting on then (the connection, the
headers, the next block of the body), so no call outlasts its deadline by more than the
moment it takes to notice. The answer is read through `bounded.read_bounded`: a server's 1 GiB
answer costs the cap's memory at most (a Content-Length past the cap is refused unread).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlsplit

from harness.bounded import SizeCap, TooLarge, read_bounded


@dataclass(frozen=True)
class Answer:
    """A whole answer: its status and body."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ValueError (json.JSONDecodeError, UnicodeDecodeError) where it is not."""
        return json.loads(self.content)


class DeadlinePassed(Exception):
    """No whole answer within the deadline."""


class ConnectionFailed(Exception):
    """No answer began: the connection was refused or dropped (its exception's name)."""


class AnswerBrokenOff(Exception):
    """An answer began and did not end as it said it would (e.g. fewer bytes than promised)."""


class _Watchdog:
    """Shuts the watched socket down at the deadline unless the request finished first. The
    socket is held here, not read from the connection: http.client lets go of it (conn.sock
    None) once an answer says it will close, while the body is still being read from it."""

    def __init__(self, seconds: float):
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # None while connecting: the connect's timeout bounds that
        self._finished = False
        self.expired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.expired:  # it fired while connecting
                self._shut()

    def _fire(self) -> None:
        with self._lock:
            if not self._finished:
                self.expired = True
                self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv, unlike close()
            except OSError:
                pass

    def finish(self) -> bool:
        """Stop the timer; whether the deadline had passed."""
        with self._lock:
            self._finished = True
            self._timer.cancel()
            return self.expired


def _connection(url: str, deadline_s: float) -> tuple[http.client.HTTPConnection, str]:
    """An unopened connection to `url`'s server, and the request target (path and query)."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"no host in the URL {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=deadline_s), target


def call(method: str, url: str, body: Any, deadline_s: float, cap: SizeCap) -> Answer:
    """`method url` (a JSON body unless None), its whole answer within `deadline_s` seconds.
    DeadlinePassed, ConnectionFailed, AnswerBrokenOff or TooLarge otherwise."""
    conn, target = _connection(url, deadline_s)
    watchdog = _Watchdog(deadline_s)
    answered = False
    try:
        conn.connect()
        watchdog.watch(conn.sock)
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn.request(method, target, None if body is None else json.dumps(body).encode(), headers)
        resp = conn.getresponse()
        answered = True
        declared = resp.getheader("Content-Length", "")
        if declared.isdigit() and int(declared) > cap.bytes:
            raise TooLarge(cap)
        content = read_bounded(resp.read, cap)
        # read(n) ends quietly where the connection does, promised bytes or not
        if declared.isdigit() and len(content) < int(declared):
            raise http.client.IncompleteRead(content, int(declared) - len(content))
    except (OSError, http.client.HTTPException) as exc:
        # Past the deadline, whatever broke was the shutdown (or a socket timeout, which no read
        # begun before the deadline reaches earlier).
        if watchdog.finish() or isinstance(exc, TimeoutError):
            raise DeadlinePassed() from None
        if not answered:
            raise ConnectionFailed(type(exc).__name__) from None
        raise AnswerBrokenOff(f"{type(exc).__name__}: {str(exc)[:160]}") from None
    finally:
        watchdog.finish()
        conn.close()  # one connection per request: nothing is left for a later one to inherit
    if watchdog.finish():  # the shutdown ended the body early: it may look whole
        raise DeadlinePassed()
    return Answer(resp.status, content)


class Stream:
    """An answer read as it comes, line by line (server-sent events), under the request's one
    deadline: the watchdog keeps watching until `close`."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, watchdog: _Watchdog):
        self._conn, self._resp, self._watchdog = conn, resp, watchdog
        self.status_code = resp.status

    def lines(self, cap: SizeCap) -> Iterator[bytes]:
        """Each line of the body (its line ending cut), none longer than `cap`; DeadlinePassed,
        AnswerBrokenOff or TooLarge where the answer does not end as a stream should."""
        try:
            while True:
                line = self._resp.readline(cap.bytes + 1)
                if not line:
                    if self._watchdog.expired:  # the shutdown ended it: it may look whole
                        raise DeadlinePassed()
                    return
                if len(line) > cap.bytes:
                    raise TooLarge(cap)
                yield line.rstrip(b"\r\n")
        except (OSError, http.client.HTTPException) as exc:
            if self._watchdog.expired or isinstance(exc, TimeoutError):
                raise DeadlinePassed() from None
            raise AnswerBrokenOff(f"{type(exc).__name__}: {str(exc)[:160]}") from None

    def whole(self, cap: SizeCap) -> Answer:
        """The rest of the body as one answer (an error's text)."""
        try:
            return Answer(self.status_code, read_bounded(self._resp.read, cap))
        except (OSError, http.client.HTTPException) as exc:
            raise AnswerBrokenOff(f"{type(exc).__name__}: {str(exc)[:160]}") from None

    def close(self) -> None:
        """Ends the request: closing the connection is what a server reads as the client leaving."""
        self._watchdog.finish()
        self._conn.close()


def open_stream(method: str, url: str, body: Any, deadline_s: float) -> Stream:
    """`method url` with its answer's status and headers in, its body still to read (`Stream`),
    all of it within `deadline_s`. DeadlinePassed or ConnectionFailed where no answer began."""
    conn, target = _connection(url, deadline_s)
    watchdog = _Watchdog(deadline_s)
    try:
        conn.connect()
        watchdog.watch(conn.sock)
        conn.request(method, target, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return Stream(conn, conn.getresponse(), watchdog)
    except (OSError, http.client.HTTPException) as exc:
        expired = watchdog.finish()
        conn.close()
        if expired or isinstance(exc, TimeoutError):
            raise DeadlinePassed() from None
        raise ConnectionFailed(type(exc).__name__) from None
