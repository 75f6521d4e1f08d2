"""The programs a design-space point is timed on (:mod:`systolica.bench.dse`): the model's shape read once per
sweep (:func:`model_shapes`), each configuration's decode and prefill words from the programs-only compile
(:func:`programs_for`), cached on disk by :func:`program_key` (configuration fields that change programs, the
model's fingerprint and the compiler's sources), and :func:`_time`, the uncached compile-and-time reference."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
from functools import lru_cache

__all__ = ["model_shapes", "program_key", "programs_for", "truncate_layers"]


def truncate_layers(model, n: int):
    """The model's first ``n`` blocks with its embedding, final norm and output (same shapes)."""
    from systolica.model import Model

    keep = {k: v for k, v in model.weights.items() if not k.startswith("blk.") or int(k.split(".")[1]) < n}
    return Model(dataclasses.replace(model.config, n_layers=n), keep, model.tokenizer, model.metadata)


@lru_cache(maxsize=4)
def _model(spec: str):
    from systolica.bench.compare import load_any_model

    return load_any_model(spec)


def _time(model, cfg, spec, prompt_len: int, gemm: str) -> tuple[int, int, int]:
    """(decode cycles at context prompt_len, prefill cycles of the prompt, prefill rows): compile and time, no cache
    (the reference :func:`evaluate` agrees with)."""
    from systolica.bench.accel_model import AccelTimer
    from systolica.compiler.compile import compile_model
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    art = compile_model(model, cfg, max_seq=_max_seq(cfg, model.config, prompt_len), prefill_chunk=16)
    timer = AccelTimer(art, board_params(cfg, dram_gbps=spec.dram_gbps, base=PerfParams(gemm=gemm)))
    prompt = [1 + (i % (model.config.vocab_size - 1)) for i in range(prompt_len)]
    rows = art.rows("prefill") if "prefill" in art.programs else 1
    return timer.decode_cycles(prompt_len), timer.prefill_cycles(prompt), rows


class _Zero:
    cycles = 0


class _Recorder:
    """Stands in for an AccelTimer's PerfModel: keeps the words of every run the timer schedules."""

    def __init__(self):
        self.runs: list[list[int]] = []

    def run(self, words):
        self.runs.append([int(w) for w in words])
        return _Zero


def _runs(model, cfg, prompt_len: int) -> tuple[list[list[int]], list[list[int]], int]:
    """The programs (patched words) a point times: (decode runs, prefill runs, prefill rows), from a full compile
    of ``model`` (the reference the programs-only compile of :func:`programs_for` is tested against)."""
    from systolica.compiler.compile import compile_model

    art = compile_model(model, cfg, max_seq=_max_seq(cfg, model.config, prompt_len), prefill_chunk=16)
    return _runs_of(art, prompt_len, model.config.vocab_size)


def _max_seq(cfg, c, prompt_len: int) -> int:
    """The context a point compiles for: the prompt and two more tokens in whole KV pages of the page the compiler
    chooses (:func:`systolica.compiler.kv_page.page_and_context`; the compiles below pass no page)."""
    from systolica.compiler.kv_page import page_and_context

    return page_and_context(cfg, c, prompt_len + 2)[1]


def _runs_of(art, prompt_len: int, vocab_size: int) -> tuple[list[list[int]], list[list[int]], int]:
    """The runs the timer schedules on ``art`` for a decode step at context ``prompt_len`` and the prompt's prefill."""
    from systolica.bench.accel_model import AccelTimer
    from systolica.sim.perf_costs import PerfParams

    timer = AccelTimer(art, PerfParams())
    timer.model = rec = _Recorder()
    timer.decode_cycles(prompt_len)
    dec = rec.runs
    timer.model = rec = _Recorder()
    timer.prefill_cycles([1 + (i % (vocab_size - 1)) for i in range(prompt_len)])
    return dec, rec.runs, art.rows("prefill") if "prefill" in art.programs else 1


def _program_runs(shape, cfg, prompt_len: int) -> tuple[list[list[int]], list[list[int]], int]:
    """:func:`_runs` from the programs-only compile of a :class:`~systolica.compiler.programs_only.ModelShape`:
    the same words, without quantizing or packing a weight."""
    from systolica.compiler.programs_only import compile_programs

    art = compile_programs(shape, cfg, max_seq=_max_seq(cfg, shape.config, prompt_len), prefill_chunk=16)
    return _runs_of(art, prompt_len, shape.config.vocab_size)


#: Blocks read of a checkpoint: layer extrapolation compiles the first one and two.
_DEPTHS = 2
_SHAPES: dict[tuple, tuple[int, list]] = {}  # (model spec, weights) -> (n_layers, [ModelShape per depth]), this process


def model_shapes(spec: str, weights: str = "int8") -> tuple[int, list]:
    """``(L, shapes)``: the model's block count and the :class:`~systolica.compiler.programs_only.ModelShape` of each
    depth a point compiles (its first 1 and 2 blocks; the whole model when ``L <= 2``).

    Read once per model: from this process, ``$SYSTOLICA_CACHE/dse-programs/shape-*.json`` (keyed as the programs
    are, :func:`program_key`), or the checkpoint, of which a GGUF gives only its metadata and first two blocks
    (:func:`~systolica.compiler.gguf_reader.read_gguf_blocks`; the tokenizer is not built).
    """
    got = _SHAPES.get((spec, weights))
    if got is not None:
        return got
    from systolica.compiler.programs_only import ModelShape

    key = {"model": _model_fingerprint(spec), "sources": _sources_digest()}
    if weights != "int8":  # (int8 keys stay those of older caches)
        key["weights"] = weights
    doc = json.dumps(key, sort_keys=True)
    path = _cache_root() / f"shape-{hashlib.sha256(doc.encode()).hexdigest()[:24]}.json"
    try:
        d = json.loads(path.read_text())
        got = (int(d["n_layers"]), [ModelShape.from_json(x) for x in d["shapes"]])
    except (OSError, ValueError, KeyError, TypeError):
        got = None
    if got is None:
        gguf = _gguf_path(spec)
        if gguf is not None:
            from systolica.compiler.gguf_reader import read_gguf_blocks

            m = read_gguf_blocks(gguf, _DEPTHS)  # read_gguf(layers=2)'s model, without the gguf package's reader
            L = int(m.metadata["file_n_layers"])
        else:
            m = _model(spec)
            L = m.config.n_layers
            m = truncate_layers(m, min(L, _DEPTHS))
        top = ModelShape.of(m, weights)
        got = (L, [top.truncated(1), top] if L > _DEPTHS else [top])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"n_layers": L, "shapes": [x.to_json() for x in got[1]]}))
            tmp.replace(path)
        except OSError:
            pass
    if len(_SHAPES) >= 8:
        _SHAPES.pop(next(iter(_SHAPES)))
    _SHAPES[spec, weights] = got
    return got


def _gguf_path(spec: str):
    """The GGUF file of ``spec`` ("default" or a path), else None."""
    from pathlib import Path

    from systolica.compiler.gguf_reader import GGUF_MAGIC

    if spec == "default":
        from systolica.compiler.model_zoo import locate_default_model

        return locate_default_model()  # None: _model raises the message that says how to fetch it
    path = Path(spec)
    if spec.startswith("random:") or not path.is_file() or path.suffix == ".safetensors":
        return None
    if path.suffix == ".gguf":
        return path
    with open(path, "rb") as f:
        return path if f.read(4) == GGUF_MAGIC else None


#: Config fields that change no instruction: programs compiled for one serve every clock (and name).
_NOT_IN_PROGRAMS = ("name", "clock_mhz")


def _shape_key(task: dict) -> tuple[str, str]:
    """(model, weight format): what :func:`model_shapes` reads once per run."""
    return task["model"], task.get("weights", "int8")


def program_key(task: dict) -> str:
    """What a point's programs depend on: the model, the configuration less its name and clock, the prompt length,
    the sources of the compiler and the core (a changed compiler never reuses old programs)."""
    cfg = {k: v for k, v in task["config"].items() if k not in _NOT_IN_PROGRAMS}
    doc = {"model": _model_fingerprint(task["model"]), "config": cfg, "prompt_len": task["prompt_len"],
           "sources": _sources_digest()}
    if task.get("weights", "int8") != "int8":  # (int8 keys stay those of older caches)
        doc["weights"] = task["weights"]
    doc = json.dumps(doc, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:24]


def _model_fingerprint(spec: str) -> list:
    from pathlib import Path

    if spec.startswith("random:"):
        return [spec]
    if spec == "default":
        from systolica.compiler.model_zoo import locate_default_model

        found = locate_default_model()
        path = Path(found) if found else None
    else:
        path = Path(spec)
    if path is None or not path.exists():
        return [spec]
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return [spec, str(path.resolve()), *[(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]]


@lru_cache(maxsize=1)
def _sources_digest() -> str:
    from pathlib import Path

    import systolica
    import systolica.bench
    import systolica.compiler

    h = hashlib.sha256()
    for pkg in (systolica, systolica.compiler):
        for f in sorted(Path(pkg.__file__).parent.glob("*.py")):
            h.update(f.name.encode() + f.read_bytes())
    for name in ("accel_model.py", "dse.py", "dse_programs.py"):
        f = Path(systolica.bench.__file__).parent / name
        h.update(name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def _cache_root():
    from systolica.compiler.model_zoo import cache_dir

    return cache_dir() / "dse-programs"


_PROGRAMS: dict[str, dict] = {}  # program_key -> programs, in this process


def programs_for(task: dict, shapes: tuple[int, list] | None = None) -> dict:
    """The word lists a point of ``task`` times, per depth (layer extrapolation: 1 and 2 blocks; the whole model when
    it has at most 2), from this process, the on-disk cache (``$SYSTOLICA_CACHE/dse-programs``), or compiled by the
    programs-only compile (:func:`~systolica.compiler.programs_only.compile_programs`: the words of a full compile,
    without quantizing or packing the weights) from :func:`model_shapes` (``shapes``: its result, when the caller
    has it).

    ``{"n_layers": L, "rows": prefill rows, "depths": [[decode runs, prefill runs], ...], "compiled": bool}``.
    """
    key = program_key(task)
    got = _PROGRAMS.get(key)
    if got is not None:
        return {**got, "compiled": False}
    path = _cache_root() / f"{key}.json.gz"
    if path.is_file():
        try:
            got = json.loads(gzip.decompress(path.read_bytes()))
            got["depths"] = [[[[int(w, 16) for w in run] for run in runs] for runs in d] for d in got["depths"]]
            got["compiled"] = False
        except (OSError, ValueError, KeyError, EOFError):
            got = None
    if got is None:
        from systolica.config import AccelConfig

        cfg = AccelConfig.from_dict(dict(task["config"]))
        try:
            L, depths = shapes if shapes is not None else model_shapes(*_shape_key(task))
            out = [_program_runs(m, cfg, task["prompt_len"]) for m in depths]
        except Exception as e:  # noqa: BLE001 - a config the model does not fit is a result, not a crash
            return {"error": f"{type(e).__name__}: {e}", "compiled": True}  # not cached: the cause may go away
        got = {"n_layers": L, "rows": out[0][2], "depths": [[d, p] for d, p, _ in out], "compiled": True}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            doc = {**got, "depths": [[[[format(w, "x") for w in run] for run in runs] for runs in d]
                                     for d in got["depths"]]}
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(gzip.compress(json.dumps(doc).encode(), 6))
            tmp.replace(path)
        except OSError:
            pass  # no cache: the next process compiles again
    if len(_PROGRAMS) >= 16:
        _PROGRAMS.pop(next(iter(_PROGRAMS)))
    _PROGRAMS[key] = got
    return got
