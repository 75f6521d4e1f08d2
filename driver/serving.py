"""Continuous batching: many requests served by one accelerator, a batched decode step at a time.

:class:`BatchServer` keeps a queue of requests.  Each :meth:`BatchServer.step` first admits waiting requests
while there is room in the batch (a request is admitted by prefilling its prompt, which samples its first
token), then runs one ``decode_batch`` step for every active request (one weight read for all of them), samples
each row and retires the requests that stopped.  Requests join and leave between steps; no program is
recompiled: the patch table carries each row's position and KV pages.

Prompt prefixes are shared: a request whose prompt starts like an active request's context forks that
sequence (:meth:`Runtime.fork`: the prefix's full KV pages shared, reference-counted; the page it ends in
copied) and prefills only the rest; ``prefill_tokens_saved`` counts what that skipped.

Prefill is not mixed into the batched decode step (chunked prefill): the batched program's rows are one token
each, and a prompt's rows would need a program with both kinds of row; prefill runs between decode steps, on
the prefill programs, at their own rate.

The tokens of a request are exactly those :meth:`Runtime.generate` gives it alone (the batched step computes
every row's integers as a decode step does): ``tests/driver/test_serving.py`` checks it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from systolica.driver.accel import RunStats
from systolica.driver.kv_cache import SequenceState
from systolica.driver.runtime import GenerationError, Runtime
from systolica.driver.sampling import Sampler, SamplingParams

__all__ = ["BatchServer", "RequestEvent", "RequestStats"]


@dataclass(frozen=True)
class RequestEvent:
    """A token of one request (``done``: its last; the request's text so far is ``RequestStats.text``)."""

    request: int
    token: int
    text: str
    done: bool


@dataclass
class RequestStats:
    """One request's tokens and host timings (seconds on this machine's clock)."""

    request: int
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    shared_prefix_tokens: int = 0  # prompt tokens whose KV pages came from another request (not prefilled)
    prefill: RunStats | None = None  # the counters of its prefill runs
    submitted_s: float = 0.0
    first_token_s: float | None = None
    done_s: float | None = None
    stop_reason: str = ""

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.submitted_s

    @property
    def decode_tokens_per_s(self) -> float | None:
        if self.done_s is None or self.first_token_s is None or len(self.tokens) < 2:
            return None
        dt = self.done_s - self.first_token_s
        return (len(self.tokens) - 1) / dt if dt > 0 else None


@dataclass
class _Request:
    stats: RequestStats
    ids: list[int]
    max_new: int
    sampler: Sampler
    stops: set[int]
    stream: object
    seq: SequenceState | None = None
    pending: int | None = None  # the sampled token the next decode step feeds


class BatchServer:
    """Serve requests on ``runtime`` with continuous batching (at most ``max_batch`` at once, default the
    artifact's batched decode step; an artifact without one serves one request at a time)."""

    def __init__(self, runtime: Runtime, max_batch: int | None = None, share_prefixes: bool = True,
                 min_shared: int | None = None):
        self.rt = runtime
        self.share_prefixes = share_prefixes
        self.min_shared = runtime.art.page if min_shared is None else int(min_shared)  # shorter: prefill it
        top = runtime.max_batch
        self.max_batch = top if max_batch is None else int(max_batch)
        if not 1 <= self.max_batch <= top:
            raise GenerationError(f"max_batch={max_batch}: the artifact's batched decode serves 1..{top} "
                                  "sequences (compile with --batch B)")
        self._waiting: deque[_Request] = deque()
        self._active: list[_Request] = []
        self._all: dict[int, RequestStats] = {}
        self.steps = 0  # batched decode runs
        self.batch_rows = 0  # rows over all of them (mean batch = batch_rows / steps)
        self.prefill_tokens = 0  # prompt tokens prefilled
        self.prefill_tokens_saved = 0  # prompt tokens taken from a shared prefix instead

    # ------------------------------------------------------------ requests
    def submit(self, prompt: str | Sequence[int], max_new_tokens: int = 32, sampling: SamplingParams | None = None,
               stop: Sequence[int] | None = None) -> int:
        """Queue a request; returns its id.  Raises :class:`GenerationError` for a prompt the runtime refuses."""
        rt = self.rt
        ids = rt._encode(prompt)
        if not ids:
            raise GenerationError("empty prompt")
        max_seq = int(rt.art.manifest["max_seq"])
        if len(ids) >= max_seq:
            raise GenerationError(f"prompt of {len(ids)} tokens leaves no room in the compiled context of {max_seq} "
                                  "tokens")
        if max_new_tokens < 1:
            raise GenerationError(f"max_new_tokens={max_new_tokens} must be at least 1")
        rid = len(self._all)
        st = RequestStats(rid, len(ids), submitted_s=time.perf_counter())
        self._all[rid] = st
        self._waiting.append(_Request(st, ids, int(max_new_tokens), Sampler(sampling or SamplingParams()),
                                      set(stop if stop is not None else rt._default_stops()),
                                      rt.tokenizer.stream() if rt.tokenizer is not None else None))
        return rid

    def stats(self, request: int) -> RequestStats:
        return self._all[request]

    @property
    def idle(self) -> bool:
        return not self._waiting and not self._active

    # ------------------------------------------------------------ scheduling
    def step(self) -> list[RequestEvent]:
        """Admit what fits, then one batched decode step of every active request; the tokens this produced."""
        out: list[RequestEvent] = []
        while self._waiting and len(self._active) < self.max_batch:
            r = self._waiting.popleft()
            donor, n = self._shared_prefix(r.ids)
            r.seq = self.rt.fork(donor.seq, n) if donor is not None else self.rt.new_sequence()
            try:
                logits, r.stats.prefill = self.rt.prefill(r.seq, r.ids[n:])
            except BaseException:
                r.seq.release()
                raise
            r.stats.shared_prefix_tokens = n
            self.prefill_tokens += len(r.ids) - n
            self.prefill_tokens_saved += n
            self._sampled(r, logits, out)
        if self._active:
            batch = list(self._active)
            logits, _ = self.rt.decode_batch([r.seq for r in batch], [r.pending for r in batch])
            self.steps += 1
            self.batch_rows += len(batch)
            for r, row in zip(batch, logits, strict=True):
                self._sampled(r, row, out)
        return out

    def _shared_prefix(self, ids: list[int]) -> tuple[_Request | None, int]:
        """The active request whose KV cache starts with the longest prefix of ``ids`` (at least ``min_shared``
        tokens, and short of the whole prompt: its last token is prefilled for the logits)."""
        best, most = None, 0
        if not self.share_prefixes:
            return best, most
        for r in self._active:
            have = r.seq.tokens[:r.seq.pos]
            n = 0
            for a, b in zip(have, ids[:-1], strict=False):
                if a != b:
                    break
                n += 1
            if n > most:
                best, most = r, n
        return (best, most) if most >= self.min_shared else (None, 0)

    def run(self) -> Iterator[RequestEvent]:
        """Steps until every request submitted so far (and any submitted meanwhile) is done."""
        while not self.idle:
            yield from self.step()

    def _sampled(self, r: _Request, logits, out: list[RequestEvent]) -> None:
        tok = r.sampler(self.rt.logits_float(logits))
        st = r.stats
        st.tokens.append(tok)
        now = time.perf_counter()
        if st.first_token_s is None:
            st.first_token_s = now
        stop = tok in r.stops
        text = r.stream.push(tok) if r.stream is not None and not stop else ""
        reason = ("stop token" if stop else "max_new_tokens" if len(st.tokens) >= r.max_new else
                  "context full" if r.seq.pos >= int(self.rt.art.manifest["max_seq"]) else "")
        if reason and r.stream is not None:
            text += r.stream.flush()
        st.text += text
        out.append(RequestEvent(st.request, tok, text, bool(reason)))
        if reason:
            st.done_s, st.stop_reason = now, reason
            r.seq.release()
            if r in self._active:
                self._active.remove(r)
        else:
            r.pending = tok
            if r not in self._active:
                self._active.append(r)
