"""A real HTTP server on 127.0.0.1 that speaks OpenAI's chat-completions protocol.

Tests script its answers (`FakeLLM.script(Reply...)`) or choose them per request
(`FakeLLM(rule=...)`); otherwise it grades by a deterministic rule: the offline lexical judge's
grade of each delimited passage. It records every request (arrival time, headers, JSON body)
and its answer for assertions.

Logprobs: a request with `logprobs` gets them (`FakeLLM(logprobs=False)` plays a server that
ignores the option). `Reply.top({...})` scripts the first position's top logprobs; the utility
probe's prompt (it names NO-RESPONSE) otherwise gets `default_top(query, passage)`.

As a process, for benchmarks and manual runs::

    python -m tests.support.fake_llm --port 8900 --latency 0.3

prints `ready http://127.0.0.1:8900/v1` and serves until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ragmon.core.utility_measures import UMBRELA_TO_UTILITY
from ragmon.workers.judges.lexical import lexical_grades

# How the judge's prompt delimits untrusted text (workers/judges/prompt.py):
# <<<QUERY nonce>>> ... <<<END nonce>>> and <<<PASSAGE nonce id=p1>>> ... <<<END nonce>>>.
_QUERY = re.compile(r"<<<QUERY ([0-9a-f]+)>>>\n(.*?)\n<<<END \1>>>", re.S)
_PASSAGE = re.compile(r"<<<PASSAGE ([0-9a-f]+) id=(\w+)>>>\n(.*?)\n<<<END \1>>>", re.S)


@dataclass
class Reply:
    """One scripted answer. `kind`: content, status, drop, refusal, empty."""

    kind: str = "content"
    content: str | None = None
    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0
    error_body: dict | None = None
    finish_reason: str = "stop"
    top: dict[str, float] | None = None  # first position's top logprobs, token -> logprob

    @classmethod
    def logprobs(cls, top: dict[str, float], content: str | None = None) -> Reply:
        """An answer whose first token has these top logprobs (content: the likeliest)."""
        return cls("content", content=content or max(top, key=top.__getitem__), top=top)

    @classmethod
    def text(cls, content: str, delay: float = 0.0) -> Reply:
        return cls("content", content=content, delay=delay)

    @classmethod
    def error(cls, status: int, retry_after: float | None = None, message: str = "") -> Reply:
        body = {"error": {"message": message or f"fake error {status}", "type": "fake"}}
        return cls("status", status=status, retry_after=retry_after, error_body=body)

    @classmethod
    def drop(cls) -> Reply:
        """Close the connection after reading the request, without answering."""
        return cls("drop")

    @classmethod
    def refusal(cls, text: str = "I'm sorry, I can't help with that.") -> Reply:
        return cls("refusal", content=text)

    @classmethod
    def empty(cls) -> Reply:
        return cls("empty", content="")

    @classmethod
    def slow(cls, delay: float) -> Reply:
        """The default rule's answer, after `delay` seconds."""
        return cls("default", delay=delay)


@dataclass
class Recorded:
    """One request as the server saw it."""

    at: float  # time.time() on arrival
    path: str
    headers: dict[str, str]
    body: dict
    answer: dict | None = None  # the JSON answered (None: an error, a drop)

    @property
    def prompt(self) -> str:
        return "\n".join(str(m.get("content") or "") for m in self.body.get("messages", []))


@dataclass
class FakeLLM:
    """The server; `latency` delays every answer; `json_schema=False` rejects response_format."""

    latency: float = 0.0
    json_schema: bool = True
    port: int = 0
    fence: bool = False  # wrap default answers without a schema in ```json fences
    api_key: str | None = None  # when set, any other bearer key gets OpenAI's 401
    models: frozenset[str] | None = None  # when set, any other model gets OpenAI's 404
    # False: a server that never returns logprobs; a predicate on the request body decides
    # per request (some events without UDCG, deterministically).
    logprobs: bool | Callable[[dict], bool] = True
    # A model the injection sways: a passage whose text this predicate accepts is graded 3.
    swayed: Callable[[str], bool] | None = None
    # A model that starts over-grading (judge drift): added to every default grade, at most 3.
    over_grade: int = 0
    # Answers chosen per request, after the script and before the default rule: a reply, or
    # None to let the default rule answer (e.g. a 500 whenever the prompt holds one passage).
    rule: Callable[[Recorded], Reply | None] | None = None
    requests: list[Recorded] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0  # the most requests the server held at once
    _script: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The `OPENAI_BASE_URL` to use."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeLLM:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", self.port), handler)
        # a short poll: `stop` waits for it, and serve_forever's default made every test that
        # used the fake wait at its end
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Down, as a dead server is: no new connection, and the open ones dropped."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.drop_connections()

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *replies: Reply) -> None:
        """Queue answers for the next requests, in order; then the default rule answers."""
        with self._lock:
            self._script.extend(replies)

    def chat_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._script.clear()
            self.max_in_flight = 0

    def _next(self, rec: Recorded) -> Reply:
        with self._lock:
            self.requests.append(rec)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self._script:
                return self._script.popleft()
        ruled = self.rule(rec) if self.rule is not None else None
        return ruled if ruled is not None else Reply("default")

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1


def default_content(
    body: dict, swayed: Callable[[str], bool] | None = None, over_grade: int = 0
) -> str:
    """The deterministic rule: the lexical judge's grades of the delimited passages (3 for a
    passage `swayed` accepts), `over_grade` higher (at most 3)."""
    prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
    q = _QUERY.search(prompt)
    query = q.group(2) if q else ""
    found = _PASSAGE.findall(prompt)
    grades = lexical_grades(query, [text for _, _, text in found]) if found else []
    if swayed is not None:
        grades = [3 if swayed(text) else g for (_, _, text), g in zip(found, grades, strict=True)]
    grades = [min(3, g + over_grade) for g in grades]
    if "integer 1, 2, 3, 4 or 5" in prompt:  # RAGMON_JUDGE_SCALE=utility5
        grades = [UMBRELA_TO_UTILITY[g] for g in grades]
    schema = _schema(body)
    props = (schema or {}).get("properties", {})
    if "grade" in props or (schema is None and len(found) <= 1):
        return json.dumps({"grade": grades[0] if grades else 0})
    return json.dumps({pid: g for (_, pid, _), g in zip(found, grades, strict=True)})


# The default rule's p(NO-RESPONSE) by lexical grade: the LLM abstains on an unrelated passage
# (0), answers from a related one that does not answer (1, a distractor) and from relevant ones.
# Grade 3 lists no abstain token at all: the probe then uses its bound.
DEFAULT_TOP: dict[int, dict[str, float]] = {
    0: {"NO": math.log(0.85), "The": math.log(0.1), "It": math.log(0.03)},
    1: {"The": math.log(0.7), "NO": math.log(0.2), "It": math.log(0.05)},
    2: {"The": math.log(0.6), "NO": math.log(0.3), "A": math.log(0.08)},
    3: {"The": math.log(0.9), "A": math.log(0.06), "It": math.log(0.01)},
}


def is_utility_prompt(body: dict) -> bool:
    return bool(body.get("logprobs")) and "NO-RESPONSE" in _prompt(body)


def default_top(query: str, passage: str) -> dict[str, float]:
    """The default rule's first-position top logprobs for a utility probe."""
    return DEFAULT_TOP[lexical_grades(query, [passage])[0]]


def _prompt(body: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def _utility_top(body: dict) -> dict[str, float]:
    prompt = _prompt(body)
    q, found = _QUERY.search(prompt), _PASSAGE.findall(prompt)
    return default_top(q.group(2) if q else "", found[0][2] if found else "")


def _schema(body: dict) -> dict | None:
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        return (rf.get("json_schema") or {}).get("schema") or {}
    return None


def _tokens(text: str) -> int:
    """A stand-in tokenizer: about four characters per token, like English with GPT tokenizers."""
    return max(1, (len(text) + 3) // 4)


def completion(
    body: dict,
    content: str | None,
    refusal: str | None,
    finish: str,
    top: dict[str, float] | None = None,
    logprobs: bool = True,
) -> dict:
    """A chat.completion object with usage (and logprobs when asked and `logprobs`); `top`
    gives the first position's top logprobs."""
    prompt = "".join(str(m.get("content") or "") for m in body.get("messages", []))
    out_tokens = _tokens(content or refusal or "")
    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": finish,
        "message": {"role": "assistant", "content": content, "refusal": refusal},
        "logprobs": None,
    }
    if body.get("logprobs") and content and logprobs:
        top_n = int(body.get("top_logprobs") or 0)
        positions = [{ch: -0.01} for ch in content]
        if top is not None:
            positions[0] = top
        choice["logprobs"] = {
            "content": [
                {
                    "token": max(alts, key=alts.__getitem__),
                    "logprob": max(alts.values()),
                    "bytes": list(max(alts, key=alts.__getitem__).encode()),
                    "top_logprobs": [
                        {"token": t, "logprob": lp, "bytes": list(t.encode())}
                        for t, lp in sorted(alts.items(), key=lambda x: -x[1])
                    ][:top_n],
                }
                for alts in positions
            ],
            "refusal": None,
        }
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": _tokens(prompt),
            "completion_tokens": out_tokens,
            "total_tokens": _tokens(prompt) + out_tokens,
        },
    }


class _Server(ThreadingHTTPServer):
    """Keeps its open connections, so that stopping it drops them as a dead server would: a
    stopped HTTP/1.1 server would otherwise go on answering on every kept-alive connection."""

    daemon_threads = True
    request_queue_size = 512  # many judges connect at once

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection dropped by `drop_connections` mid-answer is expected, not news."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeLLM
    _rec: Recorded

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        size = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(size) if size else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        rec = Recorded(
            time.time(), self.path, {k.lower(): v for k, v in self.headers.items()}, body
        )
        self._rec = rec
        reply = self.fake._next(rec)
        try:
            self._answer(body, reply)
        finally:
            self.fake._done()

    def _answer(self, body: dict, reply: Reply) -> None:
        delay = reply.delay + self.fake.latency
        if delay:
            time.sleep(delay)
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.fake.api_key is not None and key != self.fake.api_key:
            msg = f"Incorrect API key provided: {key[:3]}***. You can find your API key at ..."
            err = {"message": msg, "type": "invalid_request_error", "code": "invalid_api_key"}
            return self._json(401, {"error": err})
        if not self.path.endswith("/chat/completions"):
            return self._json(404, {"error": {"message": "not found", "type": "fake"}})
        model = body.get("model")
        if self.fake.models is not None and model not in self.fake.models:
            msg = f"The model `{model}` does not exist or you do not have access to it."
            err = {"message": msg, "type": "invalid_request_error", "code": "model_not_found"}
            return self._json(404, {"error": err})
        if reply.kind == "drop":
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.kind == "status":
            headers = {}
            if reply.retry_after is not None:
                headers["Retry-After"] = f"{reply.retry_after:g}"
            return self._json(reply.status, reply.error_body or {}, headers)
        if body.get("response_format") and not self.fake.json_schema:
            msg = "response_format json_schema is not supported by this server"
            err = {"message": msg, "type": "invalid_request_error", "param": "response_format"}
            return self._json(400, {"error": err})
        if reply.kind == "refusal":
            return self._json(200, completion(body, None, reply.content, "stop"))
        lp = self.fake.logprobs(body) if callable(self.fake.logprobs) else self.fake.logprobs
        if reply.kind in ("content", "empty"):
            answer = completion(body, reply.content, None, reply.finish_reason, reply.top, lp)
            return self._json(200, answer)
        if is_utility_prompt(body):
            top = _utility_top(body)
            first = max(top, key=top.__getitem__)
            return self._json(200, completion(body, first, None, "length", top, lp))
        content = default_content(body, self.fake.swayed, self.fake.over_grade)
        if self.fake.fence and not body.get("response_format"):
            content = f"```json\n{content}\n```"
        self._json(200, completion(body, content, None, "stop", logprobs=lp))

    def _json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        if status == 200:
            self._rec.answer = payload
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client gave up (its timeout)


def serve(argv: list[str] | None = None, ready: Callable[[str], None] = print) -> None:
    """`python -m tests.support.fake_llm`: serve the default rule until killed."""
    p = argparse.ArgumentParser(prog="python -m tests.support.fake_llm")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    p.add_argument("--no-json-schema", action="store_true", help="answer 400 to response_format")
    args = p.parse_args(argv)
    fake = FakeLLM(latency=args.latency, json_schema=not args.no_json_schema, port=args.port)
    fake.start()
    ready(f"ready {fake.url}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    import sys

    serve(sys.argv[1:], ready=lambda line: print(line, flush=True))
