"""The generation loop: one runtime for every device backend.

Load an artifact onto a device, check the device is the hardware it was
compiled for, place the DRAM image, then prefill and decode token by token,
patching the per-step fields of the programs (positions, token rows, KV pages)
without recompiling.  Tokens are yielded as soon as each exists; metrics come
from the device's cycle counters (or the performance model on the golden
backend) and the host's clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from systolica.artifact import Artifact, ArtifactError, StepState
from systolica.driver.accel import Accelerator, RunStats
from systolica.driver.device import Device
from systolica.driver.kv_cache import PagePool, SequenceState
from systolica.driver.sampling import Sampler, SamplingParams
from systolica.isa import WORD_BYTES
from systolica.numerics import FX_FRAC

__all__ = ["Runtime", "Metrics", "StepOutput", "GenerationError", "PrefillRun", "prefill_runs"]


class GenerationError(ValueError):
    """A prompt the runtime cannot serve (empty, ids outside the vocabulary, longer than the compiled context)."""


@dataclass
class Metrics:
    """What one generation cost, at the accelerator's clock and on the host."""

    backend: str
    clock_mhz: float
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill: RunStats = field(default_factory=RunStats)
    decode: RunStats = field(default_factory=RunStats)
    host_s: float = 0.0  # wall time of the whole generation on this machine
    device_host_s: float = 0.0  # of which the device (or simulator) ran
    prefill_host_s: float = 0.0  # wall time from the prompt to the first token's logits, on this machine
    decode_host_s: float = 0.0  # wall time of the decode steps (not the caller's time between tokens)
    macs_per_token: int | None = None  # of one decode step at the mean context of the run (the model's shape)
    array_macs_per_cycle: int = 0  # the array's peak (rows x cols)

    def _s(self, cycles: int) -> float:
        return cycles / (self.clock_mhz * 1e6)

    @property
    def has_cycles(self) -> bool:
        return self.prefill.cycles > 0 or self.decode.cycles > 0

    @property
    def ttft_s(self) -> float | None:
        """Time to first token at the board clock: the prefill runs (None without cycle counts)."""
        return self._s(self.prefill.cycles) if self.has_cycles else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        steps = max(self.generated_tokens - 1, 0)
        if not self.has_cycles or steps == 0 or self.decode.cycles == 0:
            return None
        return steps / self._s(self.decode.cycles)

    @property
    def dma_bytes_per_token(self) -> float | None:
        steps = max(self.generated_tokens - 1, 0)
        return (self.decode.dma_rd_bytes + self.decode.dma_wr_bytes) / steps if steps else None

    @property
    def array_utilization(self) -> float | None:
        c = self.prefill.cycles + self.decode.cycles
        return (self.prefill.array_busy + self.decode.array_busy) / c if c else None

    @property
    def host_overhead_per_token_s(self) -> float | None:
        n = self.prompt_tokens + self.generated_tokens
        return (self.host_s - self.device_host_s) / n if n else None

    @property
    def host_prefill_tokens_per_s(self) -> float | None:
        """Prompt tokens per second of wall time on this machine (the simulator's own speed, not the board's)."""
        return self.prompt_tokens / self.prefill_host_s if self.prompt_tokens and self.prefill_host_s > 0 else None

    @property
    def host_decode_tokens_per_s(self) -> float | None:
        """Decode steps per second of wall time on this machine (the simulator's own speed, not the board's)."""
        steps = max(self.generated_tokens - 1, 0)
        return steps / self.decode_host_s if steps and self.decode_host_s > 0 else None

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("ttft_s", "decode_tokens_per_s", "dma_bytes_per_token", "array_utilization",
                  "host_overhead_per_token_s", "host_prefill_tokens_per_s", "host_decode_tokens_per_s"):
            d[k] = getattr(self, k)
        return d


@dataclass(frozen=True)
class PrefillRun:
    """One run of a prompt's prefill: program ``kind`` on the ``rows`` tokens from prompt position ``start``."""

    kind: str
    start: int
    rows: int


def prefill_runs(artifact: Artifact, n: int) -> list[PrefillRun]:
    """How a prompt of ``n`` tokens is prefilled: the runs in order, the last one giving the logits.

    As few runs as the programs' rows allow: ``prefill_nohead`` chunks that only fill the KV cache, then one
    ``prefill`` run ending with the prompt (a prompt that fits it is that one run).  The rows are spread evenly
    over the runs rather than filling all but a small rest: a run of a few rows reads every weight for little
    work (GEMM_STREAM is bound by the weight stream below ``cols / dma_ports * bpl`` rows).  Without prefill
    programs every token is a decode step.
    """
    if n < 1:
        raise GenerationError("the prompt is empty: nothing to prefill")
    progs = artifact.programs
    if "prefill" not in progs:
        return [PrefillRun("decode", i, 1) for i in range(n)]
    head = artifact.rows("prefill")
    body_kind = "prefill_nohead" if "prefill_nohead" in progs else "prefill"
    body = artifact.rows(body_kind)
    if n <= head:
        return [PrefillRun("prefill", 0, n)]
    q = 1 + -(-(n - head) // body)  # runs: the fewest that hold the prompt
    last = max(n - (q - 1) * body, min(head, -(-n // q)))  # the head run's rows; the body runs hold the rest
    rest = n - last
    sizes = [rest // (q - 1) + (i < rest % (q - 1)) for i in range(q - 1)]
    runs, start = [], 0
    for r in sizes:
        runs.append(PrefillRun(body_kind, start, r))
        start += r
    return [*runs, PrefillRun("prefill", start, last)]


@dataclass
class StepOutput:
    token: int
    text: str  # the new text this token completes (may be "" inside a multi-byte character)


class Runtime:
    """A compiled model on a device.

    Parameters
    ----------
    artifact
        The compiled model (:meth:`Artifact.load`).
    device
        Any :class:`~systolica.driver.device.Device` backend.
    tokenizer
        Text <-> ids; default: the one the artifact carries (if any).
    timeout_s
        Per-run watchdog; a device that does not finish is reset and :class:`DeviceTimeout` raised.
    """

    def __init__(self, artifact: Artifact, device: Device, tokenizer=None, timeout_s: float = 120.0):
        self.art = artifact
        self.dev = device
        self.acc = Accelerator(device, timeout_s=timeout_s)
        self.acc.check_config(int(artifact.manifest["config_hash32"]), "the artifact")
        self.cfg = artifact.config
        if artifact.manifest.get("programs_only"):
            raise ArtifactError("this artifact holds the programs of a model without its weights (a programs-only "
                                "compile, for timing): it cannot run; compile the model with `systolica compile`")
        size = -(-artifact.dram_bytes // 4096) * 4096
        self.window = device.alloc(size)
        self.window.view[:artifact.image.size] = artifact.image
        self.window.sync_to_device()
        declare = getattr(device, "declare_readonly", None)  # a simulator may keep read-only data converted
        if declare is not None:
            for r in artifact.manifest["regions"]:
                if r.get("kind") == "weight":
                    declare(self.window, int(r["offset"]), int(r["size"]))
        kv = artifact.manifest["kv"]
        self.pool = PagePool(int(kv["n_pages"]), int(kv["page"]))
        self.tokenizer = tokenizer if tokenizer is not None else _artifact_tokenizer(artifact)
        self.vocab = int(artifact.manifest["model"]["vocab_size"])

    # ------------------------------------------------------------ one run
    def _run(self, kind: str, seq: SequenceState, tokens: Sequence[int]) -> tuple[np.ndarray, RunStats]:
        seq.reserve(len(tokens))
        stats = self._execute(kind, StepState(seq.pos, list(tokens), seq.block_table))
        seq.pos += len(tokens)
        seq.tokens.extend(int(t) for t in tokens)
        logits = self.art.read_logits(np.asarray(self.window.view))
        return logits, stats

    def _execute(self, kind: str, st: StepState) -> RunStats:
        """Write program ``kind`` patched for ``st`` into its region and run it."""
        raw = self.art.patched_image(kind, st)
        region = self.art.region(f"program:{kind}")
        if raw.size > region["size"]:
            raise ArtifactError(f"{kind} program ({raw.size} bytes) does not fit its region ({region['size']} bytes): "
                               "the artifact is inconsistent; recompile it with `systolica compile`")
        self.window.view[region["offset"]:region["offset"] + raw.size] = raw
        return self.acc.run(self.window, region["offset"], raw.size // WORD_BYTES)

    def new_sequence(self) -> SequenceState:
        """An empty sequence holding KV pages of this runtime's pool; ``release()`` it when done."""
        return SequenceState(self.pool)

    def fork(self, seq: SequenceState, n: int) -> SequenceState:
        """A new sequence that starts with ``seq``'s first ``n`` tokens without computing them again (prefix
        sharing): it shares their full KV pages and gets a copy of the page they end in (copy-on-write at the
        first divergent page, done here in DRAM for every layer).  Prefill only what follows.  Its logits are
        bit for bit those of a sequence that prefilled all of its tokens."""
        new, copy = seq.fork(n)
        if copy is not None:
            kv = self.art.manifest["kv"]
            page_bytes = int(kv["heads"]) * int(kv["tile_bytes"])
            view = self.window.view
            self.window.sync_from_device()  # the accelerator wrote the KV cache
            for layer in range(int(kv["layers"])):
                src, dst = (int(kv["base"]) + (layer * int(kv["n_pages"]) + p) * page_bytes for p in copy)
                view[dst:dst + page_bytes] = view[src:src + page_bytes]
            self.window.sync_to_device()
        return new

    def prefill(self, seq: SequenceState, tokens: Sequence[int]) -> tuple[np.ndarray, RunStats]:
        """Feed a prompt in the runs of :func:`prefill_runs` (the same integers as one decode step per token).

        Returns the fx int32 logits after the last token and the summed counters of the runs.
        """
        toks = [int(t) for t in tokens]
        total, logits = RunStats(), None
        for run in prefill_runs(self.art, len(toks)):
            logits, st = self._run(run.kind, seq, toks[run.start:run.start + run.rows])
            total = total + st
        return logits, total

    def decode(self, seq: SequenceState, token: int) -> tuple[np.ndarray, RunStats]:
        """One decode step of ``token`` at the sequence's next position: fx logits and counters."""
        return self._run("decode", seq, [int(token)])

    @property
    def max_batch(self) -> int:
        """Sequences one :meth:`decode_batch` step serves (1: the artifact has no batched program)."""
        return self.art.rows("decode_batch") if "decode_batch" in self.art.programs else 1

    def decode_batch(self, seqs: Sequence[SequenceState], tokens: Sequence[int]) -> tuple[np.ndarray, RunStats]:
        """One decode step of several sequences in one run (continuous batching): ``tokens[i]`` at ``seqs[i]``'s
        next position, each on its own KV pages; one weight read serves them all.  Any sequences, in any order,
        from one step to the next (they join and leave between steps).  Returns the fx logits ``(n, vocab)``
        (row ``i``: ``seqs[i]``) and the counters of the run: the same integers as :meth:`decode` per sequence.
        """
        n = len(seqs)
        if n != len(tokens):
            raise GenerationError(f"{n} sequences and {len(tokens)} tokens")
        if len({id(s) for s in seqs}) != n:
            raise GenerationError("a sequence appears twice in one batched step")
        if n > self.max_batch:
            raise GenerationError(f"{n} sequences in one step: the artifact's batched decode serves at most "
                                  f"{self.max_batch} (compile with --batch {n})")
        if n == 1 and "decode_batch" not in self.art.programs:
            logits, st = self.decode(seqs[0], tokens[0])
            return logits[None, :], st
        for s in seqs:
            s.reserve(1)
        stats = self._execute("decode_batch", StepState(0, [int(t) for t in tokens], [],
                                                        rows=[(s.pos, list(s.block_table)) for s in seqs]))
        for s, t in zip(seqs, tokens, strict=True):
            s.pos += 1
            s.tokens.append(int(t))
        return self.art.read_logits(np.asarray(self.window.view), rows=n), stats

    # ------------------------------------------------------------ generation
    def generate(self, prompt: str | Sequence[int], max_new_tokens: int = 32,
                 sampling: SamplingParams | None = None, stop: Sequence[int] | None = None,
                 metrics: Metrics | None = None) -> Iterator[StepOutput]:
        """Yield each new token (with its text) as soon as it exists.

        ``prompt`` is text (needs a tokenizer) or token ids.  Generation ends after ``max_new_tokens``,
        at a stop token (default: the tokenizer's EOS), or when the compiled context is full.
        Pass a :class:`Metrics` to have it filled in.  A final ``StepOutput(-1, text)`` carries text
        the tokenizer held back (an unfinished multi-byte character).

        Raises
        ------
        GenerationError
            Text without a tokenizer, an empty prompt, ids outside the vocabulary, or a prompt that
            leaves no room in the compiled context.
        SimFault
            The accelerator stopped with a fault (its subclass names it, with the PC and instruction).
        DeviceTimeout
            A run did not finish within ``timeout_s``; the device was reset.
        """
        t_start = time.perf_counter()
        ids = self._encode(prompt)
        m = metrics if metrics is not None else Metrics(self.dev.name, self.cfg.clock_mhz)
        m.backend, m.clock_mhz = self.dev.name, self.cfg.clock_mhz
        m.prompt_tokens = len(ids)
        stops = set(stop if stop is not None else self._default_stops())
        sampler = Sampler(sampling or SamplingParams())
        stream = self.tokenizer.stream() if self.tokenizer is not None else None
        max_seq = int(self.art.manifest["max_seq"])
        if len(ids) >= max_seq:
            raise GenerationError(f"prompt of {len(ids)} tokens leaves no room in the compiled context of {max_seq} "
                                  "tokens: shorten it or compile with a larger max_seq (--max-seq)")
        seq = self.new_sequence()
        try:
            logits, st = self.prefill(seq, ids)
            m.prefill, m.device_host_s = st, st.host_s
            m.prefill_host_s = time.perf_counter() - t_start
            for i in range(max_new_tokens):
                tok = sampler(self.logits_float(logits))
                m.generated_tokens += 1
                done = tok in stops
                text = stream.push(tok) if stream is not None and not done else ""
                m.host_s = time.perf_counter() - t_start
                yield StepOutput(tok, text)
                if done or i == max_new_tokens - 1 or seq.pos >= max_seq:
                    break
                t_step = time.perf_counter()
                logits, st = self.decode(seq, tok)
                m.decode_host_s += time.perf_counter() - t_step
                m.decode = m.decode + st
                m.device_host_s += st.host_s
            if stream is not None:
                tail = stream.flush()
                if tail:
                    yield StepOutput(-1, tail)
        finally:
            seq.release()
            m.host_s = time.perf_counter() - t_start
            m.array_macs_per_cycle = self.cfg.peak_macs_per_cycle
            m.macs_per_token = _decode_macs(self.art, m.prompt_tokens + max(m.generated_tokens - 1, 0) // 2)

    def logits_float(self, fx: np.ndarray) -> np.ndarray:
        """Real values (float64) of fx logits, cut to the vocabulary."""
        return np.asarray(fx, np.float64)[: self.vocab] / (1 << FX_FRAC)

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise GenerationError("this artifact carries no tokenizer: pass token ids instead of text")
            return list(self.tokenizer.encode(prompt))
        ids = [int(t) for t in prompt]
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise GenerationError(f"token ids {bad[:5]} are outside the vocabulary 0..{self.vocab - 1}")
        return ids

    def _default_stops(self) -> list[int]:
        eos = getattr(self.tokenizer, "eos_id", None)
        return [eos] if eos is not None else []

    def close(self) -> None:
        self.dev.close()


def _decode_macs(artifact: Artifact, context: int) -> int | None:
    """MACs of one decode step at ``context`` cached positions (weights and attention), from the model's shape
    in the manifest; None when the manifest does not give a usable shape."""
    from systolica.model import ModelConfig
    from systolica.sim.roofline import model_work

    shape = artifact.manifest.get("model")
    if not isinstance(shape, dict):
        return None
    try:
        c = ModelConfig(**{k: v for k, v in shape.items() if k in ModelConfig.__dataclass_fields__})
        return int(model_work(c).macs_per_token(context))
    except (TypeError, ValueError, ArithmeticError):
        return None


def _artifact_tokenizer(artifact: Artifact):
    data = artifact.manifest.get("tokenizer")
    if not data:
        return None
    from systolica.tokenizer import Tokenizer

    try:
        return Tokenizer.from_dict(data)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises bare Exceptions on bad data
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ArtifactError(f"the tokenizer the artifact carries cannot be built ({msg}): recompile the model "
                            "with `systolica compile`") from e
