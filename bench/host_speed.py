"""Host speed of the golden simulator beside llama.cpp, in one process on the same cores.

``python -m systolica.bench.host_speed`` runs SmolLM2-135M-Instruct (the default
model, compiled for the default configuration with ``systolica run``'s default
options: split activations, the compiler's KV page, context 256, prefill chunk 16) on the golden
backend: a prompt of ``--prompt-tokens`` tokens is prefilled, then ``--tokens``
decode steps run, and the host wall time of each is reported.  When
``llama_cpp`` (llama-cpp-python) is importable, llama.cpp decodes the same GGUF
with ``--threads`` threads in the same process, and the ratio is printed.

This is a measurement, not a test: figures depend on the machine and its load.
:func:`golden_host_speed` is the hook for ``systolica bench`` (one row: the
simulator's own tokens/s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["HostSpeed", "golden_host_speed", "llama_cpp_speed", "load_default_artifact", "main"]


@dataclass
class HostSpeed:
    """Wall-clock speed of one engine on this machine."""

    engine: str
    decode_tokens_per_s: float | None
    prefill_s: float | None = None  # wall time of the prompt (prefill_tokens tokens)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    threads: int | None = None
    note: str = ""
    decode_cpu_tokens_per_s: float | None = None  # per second of this process's CPU time (robust on a busy host)


def load_default_artifact(cfg=None, *, page: int | None = None, max_seq: int = 256, prefill_chunk: int = 16,
                          act_split: bool = True, say=print):
    """The SmolLM2 artifact ``systolica run`` would use: from its cache when there, else compiled now (not saved).

    Returns ``(artifact, gguf_path)``.  ``page`` None: the compiler's choice (the cache key says ``pauto``, as
    :func:`systolica.cli.run.cached_artifact` writes it).
    """
    from systolica.artifact import Artifact
    from systolica.compiler.compile import compile_model
    from systolica.compiler.frontend import load_model
    from systolica.compiler.model_zoo import cache_dir, fetch_default_model
    from systolica.config import load_config

    cfg = cfg if cfg is not None else load_config(None)
    gguf = Path(fetch_default_model(verbose=False))
    pattern = (f"{gguf.stem}-*-{cfg.hash_hex()[:8]}-p{'auto' if page is None else page}-s{max_seq}-c{prefill_chunk}"
               f"-a{int(act_split)}-v*.systolica")
    for file in sorted((cache_dir() / "artifacts").glob(pattern)):
        try:
            return Artifact.load(file, config=cfg), gguf
        except Exception as e:  # noqa: BLE001 - a stale cache entry: compile below instead
            say(f"cached artifact {file} is unusable ({e}); compiling")
    say(f"compiling {gguf.name} for {cfg.name!r} (not cached: run `systolica run` once to cache it)")
    model = load_model(str(gguf))
    art = compile_model(model, cfg, page=page, max_seq=min(max_seq, model.config.max_seq),
                        prefill_chunk=prefill_chunk, act_split=act_split)
    return art, gguf


def _prompt_ids(art, n: int) -> list[int]:
    """A prompt of exactly ``n`` token ids: a sentence repeated, tokenized by the artifact's tokenizer."""
    from systolica.driver.runtime import _artifact_tokenizer

    tok = _artifact_tokenizer(art)
    if tok is None:  # a test model without a tokenizer: any ids of its vocabulary
        vocab = int(art.manifest["model"]["vocab_size"])
        return [1 + i % (vocab - 1) for i in range(n)]
    text = "The capital of France is Paris, and the capital of Italy is Rome. "
    ids: list[int] = []
    while len(ids) < n:
        ids += list(tok.encode(text))
    return ids[:n]


def golden_host_speed(art=None, *, prompt_tokens: int = 128, decode_tokens: int = 32, cycle_model: bool = False,
                      profile: str | None = None) -> HostSpeed:
    """Prefill ``prompt_tokens`` tokens, then run ``decode_tokens`` greedy decode steps on the golden backend.

    ``cycle_model`` attaches the performance model as ``systolica run`` does (its time then counts too: it
    times every program); off by default, so the figure is the golden simulator's own.  ``profile``: write a cProfile of the decode steps to this file.
    """
    import numpy as np

    from systolica.driver.golden_device import GoldenDevice
    from systolica.driver.runtime import Runtime

    if art is None:
        art, _ = load_default_artifact()
    cfg = art.config
    kw = {}
    if cycle_model:
        from systolica.sim.perf import cycle_model as make_cycle_model

        kw["cycle_model"] = make_cycle_model(cfg)
    dev = GoldenDevice(cfg, dram_bytes=-(-art.dram_bytes // 4096) * 4096 + 4096, **kw)
    rt = Runtime(art, dev, timeout_s=1e6)
    seq = rt.new_sequence()
    ids = _prompt_ids(art, prompt_tokens)
    t0 = time.perf_counter()
    logits, _ = rt.prefill(seq, ids)
    prefill_s = time.perf_counter() - t0
    tok = int(np.argmax(logits))
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    for _ in range(decode_tokens):
        logits, _ = rt.decode(seq, tok)
        tok = int(np.argmax(logits))
    if prof:
        prof.disable()
        prof.dump_stats(profile)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    plan = "plans" if getattr(dev._sim, "fast", False) else "per-instruction"
    if plan == "plans":
        from systolica.sim.golden_kernels import int8_kernel

        plan += ", numba kernels" if int8_kernel() is not None else ", numpy only (no numba)"
    seq.release()
    rt.close()
    return HostSpeed("golden simulator", decode_tokens / dt if dt > 0 else None, prefill_s, prompt_tokens,
                     decode_tokens, threads=1,
                     note=f"{plan}, performance model {'on' if cycle_model else 'off'}",
                     decode_cpu_tokens_per_s=decode_tokens / dc if dc > 0 else None)


def llama_cpp_speed(gguf: str | Path, *, prompt_tokens: int = 128, decode_tokens: int = 32,
                    threads: int = 1) -> HostSpeed:
    """llama.cpp (llama-cpp-python) on the same GGUF: prefill and greedy decode timed apart."""
    try:
        import llama_cpp
    except ImportError:
        return HostSpeed("llama.cpp", None, threads=threads,
                         note="llama-cpp-python is not installed (pip install llama-cpp-python): no baseline")
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=max(512, prompt_tokens + decode_tokens + 8), n_threads=threads,
                          n_threads_batch=threads, n_batch=max(prompt_tokens, 8), verbose=False, seed=0)
    text = "The capital of France is Paris, and the capital of Italy is Rome. "
    ids: list[int] = []
    while len(ids) < prompt_tokens:
        ids += llm.tokenize(text.encode(), add_bos=False)
    ids = ids[:prompt_tokens]
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(decode_tokens):
        tok = llm.sample(temp=0.0)
        llm.eval([tok])
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return HostSpeed("llama.cpp", decode_tokens / dt, prefill_s, prompt_tokens, decode_tokens, threads,
                     note=f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')}",
                     decode_cpu_tokens_per_s=decode_tokens / dc if dc > 0 else None)


def _threads() -> int:
    """The thread count both engines get: the golden simulator's BLAS threads (1 unless the environment says)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m systolica.bench.host_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=32, help="decode steps to time (default 32)")
    p.add_argument("--prompt-tokens", type=int, default=128, help="prompt length to prefill (default 128)")
    p.add_argument("--perf-model", action="store_true",
                   help="attach the performance model as systolica run does (it times every program: slower)")
    p.add_argument("--no-llama", action="store_true", help="skip the llama.cpp baseline")
    p.add_argument("--profile", metavar="FILE", help="write a cProfile of the golden decode steps")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    threads = _threads()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    art, gguf = load_default_artifact(say=lambda s: print(s, file=sys.stderr))
    rows = [golden_host_speed(art, prompt_tokens=args.prompt_tokens, decode_tokens=args.tokens,
                              cycle_model=args.perf_model, profile=args.profile)]
    if not args.no_llama:
        rows.append(llama_cpp_speed(gguf, prompt_tokens=args.prompt_tokens, decode_tokens=args.tokens,
                                    threads=threads))
    g, ll = rows[0], rows[-1]
    ratio = (g.decode_tokens_per_s / ll.decode_tokens_per_s
             if len(rows) > 1 and ll.decode_tokens_per_s and g.decode_tokens_per_s else None)
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "ratio_decode": ratio, "threads": threads}, indent=1))
        return 0
    print(f"{'engine':<18} {'threads':>7} {'prefill':>16} {'decode tok/s':>13} {'(per CPU s)':>12}  note")
    for r in rows:
        pre = f"{r.prefill_s:.2f} s/{r.prefill_tokens} tok" if r.prefill_s is not None else "n/a"
        dec = f"{r.decode_tokens_per_s:.2f}" if r.decode_tokens_per_s is not None else "n/a"
        cpu = f"{r.decode_cpu_tokens_per_s:.2f}" if r.decode_cpu_tokens_per_s is not None else "n/a"
        print(f"{r.engine:<18} {r.threads or '':>7} {pre:>16} {dec:>13} {cpu:>12}  {r.note}")
    if ratio is not None:
        cr = (g.decode_cpu_tokens_per_s / ll.decode_cpu_tokens_per_s
              if g.decode_cpu_tokens_per_s and ll.decode_cpu_tokens_per_s else None)
        print(f"golden / llama.cpp decode: {ratio:.3f}x wall" + (f", {cr:.3f}x per CPU second" if cr else ""))
    elif not args.no_llama:
        print("golden / llama.cpp decode: n/a (llama.cpp is not installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
