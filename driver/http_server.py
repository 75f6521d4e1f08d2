"""A small HTTP endpoint in the shape of the OpenAI completions API, over :class:`BatchServer`.

``POST /v1/completions`` with ``{"prompt": "..." or [token ids], "max_tokens": 16, "temperature": 0,
"top_p": 1, "top_k": 0, "seed": null, "stop": null, "stream": false}`` answers
``{"id", "object": "text_completion", "created", "model", "choices": [{"index": 0, "text", "tokens",
"finish_reason"}], "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}, "timing": {"ttft_s",
"decode_tokens_per_s", "shared_prefix_tokens"}}``; with ``"stream": true`` the tokens come as server-sent
events (``data: {...}`` chunks, then ``data: [DONE]``), as OpenAI clients read them.  ``GET /v1/models``
lists the one model; ``GET /health`` says how many requests run and wait.

One scheduler thread owns the runtime and the :class:`BatchServer`: HTTP threads hand requests to it and
wait for their tokens, so concurrent clients share batched decode steps.  Standard library only
(``http.server``): the endpoint is a demonstration and a test harness, not a production front end.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from systolica.driver.runtime import GenerationError, Runtime
from systolica.driver.sampling import SamplingError, SamplingParams
from systolica.driver.serving import BatchServer

__all__ = ["CompletionServer", "SchedulerStopped"]

_FINISH = {"stop token": "stop", "max_new_tokens": "length", "context full": "length"}


class SchedulerStopped(RuntimeError):
    """The scheduler thread is gone (an accelerator fault stopped it, or the server was stopped)."""


class _Scheduler(threading.Thread):
    """Runs the BatchServer: submissions in, events out to each request's queue."""

    def __init__(self, srv: BatchServer):
        super().__init__(daemon=True, name="systolica-scheduler")
        self.srv = srv
        self.inbox: queue.Queue = queue.Queue()
        self.outs: dict[int, queue.Queue] = {}
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def submit(self, prompt, max_tokens: int, sampling: SamplingParams, stop) -> tuple[int, queue.Queue]:
        """Queue a request; its id and event queue.  :class:`SchedulerStopped` once the scheduler has stopped
        (after an accelerator fault it does not serve again: restart the server)."""
        reply: queue.Queue = queue.Queue()
        self.inbox.put((prompt, max_tokens, sampling, stop, reply))
        while True:
            try:
                rid, out = reply.get(timeout=0.5)
                break
            except queue.Empty:
                if not self.is_alive():
                    raise SchedulerStopped(f"the scheduler stopped ({type(self.error).__name__}: {self.error})"
                                           if self.error else "the scheduler stopped") from None
        if isinstance(rid, BaseException):
            raise rid
        return rid, out

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                item = self.inbox.get(timeout=0.05) if self.srv.idle else self.inbox.get_nowait()
            except queue.Empty:
                item = None
            while item is not None:
                prompt, max_tokens, sampling, stop, reply = item
                try:
                    rid = self.srv.submit(prompt, max_tokens, sampling=sampling, stop=stop)
                except (GenerationError, ValueError) as e:
                    reply.put((e, None))
                else:
                    self.outs[rid] = queue.Queue()
                    reply.put((rid, self.outs[rid]))
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    item = None
            if self.srv.idle:
                continue
            try:
                events = self.srv.step()
            except BaseException as e:  # noqa: BLE001 - a fault on the accelerator: every waiting request learns it
                self.error = e
                for q in self.outs.values():
                    q.put(e)
                self.outs.clear()
                return
            for ev in events:
                self.outs[ev.request].put(ev)
                if ev.done:
                    del self.outs[ev.request]


class CompletionServer:
    """``CompletionServer(runtime, host, port).start()``: the endpoint on a background thread (port 0: any free
    port; :attr:`port` says which).  ``stop()`` shuts it down."""

    def __init__(self, runtime: Runtime, host: str = "127.0.0.1", port: int = 8000, model_name: str = "systolica",
                 max_batch: int | None = None):
        self.rt, self.model_name = runtime, model_name
        self.srv = BatchServer(runtime, max_batch=max_batch)
        self.sched = _Scheduler(self.srv)
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> CompletionServer:
        self.sched.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="systolica-http")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.sched.start()
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.sched.stopping.set()


def _handler(app: CompletionServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the CLI prints its own line per request
            pass

        def _json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, msg: str) -> None:
            self._json(code, {"error": {"message": msg, "type": "invalid_request_error" if code < 500 else
                                        "server_error"}})

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": app.model_name, "object": "model",
                                                             "owned_by": "systolica"}]})
            elif self.path == "/health":
                self._json(200, {"ok": app.sched.error is None, "active": len(app.srv._active),
                                 "waiting": len(app.srv._waiting), "max_batch": app.srv.max_batch})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self):  # noqa: N802
            if self.path != "/v1/completions":
                self._error(404, f"no route {self.path}")
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(req, dict):
                    raise ValueError("the body is not a JSON object")
                prompt = req.get("prompt")
                if not (isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(t, int)
                                                                                        for t in prompt))):
                    raise ValueError("prompt must be a string or a list of token ids")
                max_tokens = int(req.get("max_tokens", 16))
                sampling = SamplingParams(temperature=float(req.get("temperature", 0.0)),
                                          top_k=int(req.get("top_k", 0)), top_p=float(req.get("top_p", 1.0)),
                                          seed=req.get("seed"))
                stop = req.get("stop_token_ids")
                rid, out = app.sched.submit(prompt, max_tokens, sampling, stop)
            except (ValueError, TypeError, SamplingError, GenerationError) as e:
                self._error(400, str(e))
                return
            except SchedulerStopped as e:
                self._error(503, str(e))
                return
            cid = f"cmpl-{uuid.uuid4().hex[:12]}"
            created = int(time.time())
            stream = bool(req.get("stream", False))
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")  # the events end with the connection (no length)
                self.end_headers()
                self.close_connection = True
            tokens, text = [], ""
            while True:
                ev = out.get()
                if isinstance(ev, BaseException):
                    if stream:
                        self.wfile.write(b"data: " + json.dumps({"error": {"message": str(ev)}}).encode() +
                                         b"\n\ndata: [DONE]\n\n")
                    else:
                        self._error(500, f"{type(ev).__name__}: {ev}")
                    return
                tokens.append(ev.token)
                text += ev.text
                if stream:
                    chunk = {"id": cid, "object": "text_completion", "created": created, "model": app.model_name,
                             "choices": [{"index": 0, "text": ev.text, "tokens": [ev.token],
                                          "finish_reason": _FINISH.get(app.srv.stats(rid).stop_reason)
                                          if ev.done else None}]}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                if ev.done:
                    break
            st = app.srv.stats(rid)
            if stream:
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                return
            self._json(200, {"id": cid, "object": "text_completion", "created": created, "model": app.model_name,
                             "choices": [{"index": 0, "text": text, "tokens": tokens,
                                          "finish_reason": _FINISH.get(st.stop_reason, st.stop_reason)}],
                             "usage": {"prompt_tokens": st.prompt_tokens, "completion_tokens": len(tokens),
                                       "total_tokens": st.prompt_tokens + len(tokens)},
                             "timing": {"ttft_s": st.ttft_s, "decode_tokens_per_s": st.decode_tokens_per_s,
                                        "shared_prefix_tokens": st.shared_prefix_tokens}})

    return Handler
