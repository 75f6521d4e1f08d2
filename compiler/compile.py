"""The compiler driver: Model -> Artifact, pass by pass, with the IR verifier between passes.

    build_graph -> verify -> quantize (+ verify against the weight shapes) -> build_image (DRAM layout)
    -> plan_program (on-chip blocks, tiling) -> generate (instructions + hazards) -> Scheduler (tokens)
    -> verify_tokens (deadlock freedom) -> encode -> Artifact

Three programs: ``decode`` (one row), ``prefill`` (up to ``chunk`` rows, the logits of the last) and
``prefill_nohead`` (up to its ``chunk`` rows, no final norm and no logits: a chunk that is not the
prompt's last only fills the KV cache).  Both prefill programs run any number of rows up to theirs
(the row counts are patched, :mod:`systolica.compiler.codegen`).  Every op is row-wise, so a prefill
run gives the same integers as that many decode steps.

A prefill chunk is chosen from the configuration (:func:`choose_chunk`): at least :func:`min_chunk`
rows, so that each GEMM_STREAM computes longer than its weights take to stream; past that more rows
add nothing to the array's work per row, only fewer runs, while the vector buffer they fill leaves
narrower output blocks (more instructions per row).  So: the largest chunk up to the requested one
whose compute instructions per row are within :data:`CHUNK_SLACK` of the fewest.  With 4-bit weights the
chunk is also at most :func:`q4_row_cap` rows: a GEMM_STREAM with ``wfmt`` Q4_0 / Q4_1 takes at most
:data:`systolica.wstream4.MAX_ROWS` rows (the array holds the group partial sums of that many), so a larger
requested chunk is reduced to it with a :class:`CompileWarning` (the runtime runs a longer prompt in several
chunks), and a batched decode step of more rows is a :class:`CompileError`.
"""

from __future__ import annotations

import time
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable

import numpy as np

from systolica import wstream4
from systolica.artifact import FORMAT, FORMAT_VERSION, Artifact, base_state
from systolica.compiler.codegen import generate
from systolica.compiler.image import build_image
from systolica.compiler.ir import build_graph
from systolica.compiler.kv_page import PageChoice, page_choice
from systolica.compiler.memory import MemoryError_
from systolica.compiler.plan import logit_rows, plan_program, used_matrices
from systolica.compiler.quantize_pass import quantize
from systolica.compiler.schedule import verify_tokens
from systolica.config import AccelConfig
from systolica.isa import WORD_BYTES, Engine, IsaError, WFmt, encode
from systolica.layout import WPAGE, dma_line_bytes, lines_for
from systolica.model import Model
from systolica.program import Program

__all__ = ["compile_model", "CompileError", "CompileWarning"]


class CompileError(ValueError):
    """A model that cannot be compiled for a configuration, with the reason."""


class CompileWarning(UserWarning):
    """A compile argument the compiler could not honour as given (what it did instead, and why)."""


def _tokenizer_json(tok) -> dict | None:
    """The tokenizer's JSON form (``systolica.tokenizer.Tokenizer.to_dict``; ``from_dict`` rebuilds it)."""
    if tok is None:
        return None
    if not hasattr(tok, "to_dict"):
        raise CompileError(f"the model's tokenizer ({type(tok).__name__}) has no to_dict(): it cannot be stored in "
                           "the artifact")
    return tok.to_dict()


#: program kind -> whether its graph ends with the logits
PROGRAM_HEADS = {"decode": True, "prefill": True, "prefill_nohead": False, "decode_batch": True}
#: a prefill chunk whose compute instructions per row are within this factor of the fewest is as good (the
#: largest such wins: fewer runs, and short prompts in one run)
CHUNK_SLACK = 1.05


def min_chunk(cfg: AccelConfig, act_split: bool = False) -> int:
    """The fewest token rows with which GEMM_STREAM keeps the array busy: more GEMM rows than the cycles one
    ``rows x cols`` weight tile takes through the ``dma_ports`` weight ports (the array computes a row a cycle
    against a tile; one more than equal, for a DRAM a little slower than the ports); split activations make
    two GEMM rows of a token row."""
    tile = -(-cfg.rows * max(1, cfg.cols // cfg.dma_bytes) // cfg.dma_ports)
    return -(-(tile + 1) // (2 if act_split else 1))


def q4_row_cap(g, mats) -> int | None:
    """Most token rows a program of graph ``g`` may have because of its 4-bit matrices, or None (no matmul
    whose rows grow with the program's streams 4-bit weights).  A GEMM_STREAM with ``wfmt`` Q4_0 / Q4_1 takes at
    most :data:`systolica.wstream4.MAX_ROWS` rows (``wstream4.illegal``); split activations make two GEMM rows
    of a token row; the LM head of a program with the last row's logits only has one token row."""
    per_row = 2 if g.act_split else 1
    grows = [n for n in used_matrices(g) if mats[n].wfmt and (n != "output" or logit_rows(g, 2) == 2)]
    return wstream4.MAX_ROWS // per_row if grows else None


def _q4_rows_why(g, cap: int) -> str:
    split = " with split activations (two GEMM rows a token row)" if g.act_split else ""
    return (f"a GEMM_STREAM with 4-bit weights (Q4_0 / Q4_1) takes at most {wstream4.MAX_ROWS} rows (the array "
            f"holds the group partial sums of {wstream4.MAX_ROWS}), i.e. {cap} token rows{split}")


def choose_chunk(lower: Callable[[int], tuple], cfg: AccelConfig, requested: int, act_split: bool = False):
    """The lowered prefill program (``lower(rows)``'s result, whose item 1 is its instructions, each with an
    ``engine``) of the chunk for ``cfg``, or None (no chunk of 2 rows or more fits).  Chunks from
    :func:`min_chunk` up to ``requested`` are lowered while they fit and until their compute instructions per
    row pass 1.2 x the fewest; the largest within :data:`CHUNK_SLACK` of the fewest wins.  A ``requested``
    below :func:`min_chunk`: the largest chunk up to it that fits.  Only the winner is checked and encoded
    afterwards (``_finish``): a candidate that is not chosen never runs."""
    lo = min(requested, min_chunk(cfg, act_split))
    got, per_row = {}, {}
    for r in range(max(lo, 2), requested + 1):
        try:
            got[r] = lower(r)
        except MemoryError_:
            break
        per_row[r] = sum(i.engine == Engine.COMPUTE for i in got[r][1]) / r
        if per_row[r] > 1.2 * min(per_row.values()):  # past the vector buffer's cliff: larger chunks are worse
            break
    if not got:
        for r in range(lo - 1, 1, -1):
            try:
                return lower(r)
            except MemoryError_:
                continue
        return None
    best = min(per_row.values())
    return got[max(r for r, v in per_row.items() if v <= CHUNK_SLACK * best)]


def _lower(g, qm, cfg, mats, kv, lay, rows_b, rows: int, max_pages: int, batched: bool = False):
    """A program for ``rows`` rows, generated and scheduled: ``(plan, emitted, scheduler)``; :func:`_finish`
    checks and encodes it (only the prefill chunk :func:`choose_chunk` picks needs that)."""
    plan = plan_program(g, mats, cfg, kv, rows, batched)
    emitted, sched = generate(g, qm, cfg, plan, mats, kv, lay.regions, rows_b, max_pages, batched=batched)
    return plan, emitted, sched


def _finish(lowered, cfg, kind: str):
    plan, emitted, sched = lowered
    instrs = [e.instr() for e in emitted]
    for i in instrs:  # the runtime patches row counts down only: the compiled 4-bit GEMM_STREAMs must be legal
        why = wstream4.illegal(i.fields, cfg) if i.op == "GEMM_STREAM" and i.fields.get("wfmt", 0) else None
        if why:
            raise CompileError(f"{kind} program: a GEMM_STREAM with 4-bit weights would be ILLEGAL_FIELD on the "
                               f"{cfg.name!r} accelerator: {why}")
    peaks = verify_tokens(instrs, cfg.queue_depth)
    try:
        words = [encode(i) for i in instrs]
    except IsaError as e:
        raise CompileError(f"{kind} program: {e} (the model exceeds an instruction field; "
                           "try a smaller page or prefill chunk)") from None
    patches = [[i, f, k, list(a)] for i, e in enumerate(emitted) for f, k, a in e.patches]
    return plan, instrs, words, patches, {"queue_peaks": peaks, "relay_nops": sched.nops}


def compile_model(model: Model, cfg: AccelConfig, page: int | None = None, max_seq: int | None = None,
                  prefill_chunk: int = 16, progress: Callable[[str], None] | None = None,
                  act_split: bool = False, batch: int = 1, weights: str = "int8") -> Artifact:
    """Compile ``model`` for the accelerator ``cfg``.

    Parameters
    ----------
    model : Model
        A checked llama or GPT-2 model (front ends produce one).
    cfg : AccelConfig
        The accelerator.
    page : int, optional
        KV-cache page (ATTN tile) size in tokens, a power of two; default chosen from ``cfg`` and the model
        (:func:`systolica.compiler.kv_page.choose_page`: 64 unless the scratchpad or ``max_seq`` is smaller).
        The artifact records it (``art.page``; ``manifest["kv_page"]``: chosen or requested, and why); the
        integer reference must use the same (``QuantRunner(qmodel, page=art.page)``).
    max_seq : int, optional
        Longest context the programs serve; default the model's ``max_seq``.
    prefill_chunk : int
        Most rows of a prefill program (:func:`choose_chunk` picks the chunk up to it; 1 means no prefill
        programs).
    progress : callable, optional
        Called with the name of each pass as it starts.
    act_split : bool
        Quantize every linear layer's input as an int8 part plus an int8 residual (QUANT ``split=1``,
        ``QuantModel.act_split``): ~15-bit activations for twice the GEMM rows; the integer reference
        must be built with the same flag.
    batch : int
        Sequences one batched decode step serves (``decode_batch``: one sequence per row, each at its own
        position on its own KV pages, the logits of every row; one weight read feeds them all).  The KV cache
        then holds ``batch`` sequences of ``max_seq`` tokens.  1: no batched program.
    weights : {"int8", "int4", "auto"}
        Matrix weight format (``quantize_model``'s ``weights``): ``"int4"`` streams GGUF Q4_0 / Q4_1 matrices as
        their 4-bit codes with group scales and quantizes float ones to 4-bit groups unless their error is too
        large; ``"auto"`` streams only the checkpoint's own 4-bit matrices so, on a config with the 4-bit
        datapath (``wstream4.config_problem``), and is ``"int8"`` on one without;
        ``manifest["quant_formats"]`` says what each matrix got, ``manifest["weight_format"]`` the format
        asked for and ``manifest["weight_format_used"]`` what it became.  The integer reference must be built
        with the same (used) choice.

    Raises
    ------
    CompileError, MemoryError_, ModelError, QuantError
        With the tensor, buffer or field that does not fit.
    """
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    c = model.config
    max_seq = _check_args(c, cfg, page, max_seq, prefill_chunk, batch)
    say("graph")
    g = _graph(c, cfg, act_split)
    kv_page = page_choice(cfg, c, max_seq, page)
    say("quantize")
    used = "int8" if weights == "auto" and wstream4.config_problem(cfg) else weights
    qm, report = quantize(model, g, max_seq, weights=used)
    art = _compile(g, qm, cfg, kv_page=kv_page, max_seq=max_seq, prefill_chunk=prefill_chunk,
                   act_split=act_split, say=say, t0=t0, tokenizer=model.tokenizer, metadata=model.metadata,
                   quant_errors=report.errors, batch=batch)
    art.manifest["weight_format"] = weights
    art.manifest["weight_format_used"] = used
    art.manifest["quant_formats"] = {k: qm.format_of(k) for k in qm.mats}
    return art


def _check_args(c, cfg: AccelConfig, page: int | None, max_seq: int | None, prefill_chunk: int,
                batch: int = 1) -> int:
    """The checked ``max_seq`` (default the model's), or :class:`CompileError` for a bad argument (``page``
    None: the compiler chooses it)."""
    max_seq = c.max_seq if max_seq is None else int(max_seq)
    if page is not None and (page < 1 or page & (page - 1) or page > 4096):
        raise CompileError(f"page={page} must be a power of two in 1..4096 (ATTN.t is 12 bits)")
    if not 0 < max_seq <= c.max_seq:
        raise CompileError(f"max_seq={max_seq} must be in 1..{c.max_seq} (the model's context)")
    if prefill_chunk < 1:
        raise CompileError(f"prefill_chunk={prefill_chunk} must be at least 1")
    if not 1 <= batch <= 64:
        raise CompileError(f"batch={batch} must be in 1..64")
    return max_seq


def _graph(c, cfg: AccelConfig, act_split: bool):
    g = build_graph(c, act_split=act_split)  # ModelError for a bad architecture or shape
    hdl = -(-c.head_dim // cfg.cols)
    if c.group > 63 or hdl > 63:
        raise CompileError(f"ATTN holds at most 63 query heads per KV head and 63 lines per head; the model has "
                           f"{c.group} and {hdl} (head_dim={c.head_dim}, cols={cfg.cols})")
    if hdl > cfg.attn_max_lines:
        raise CompileError(f"config {cfg.name!r} takes heads of at most {cfg.attn_max_lines} lines (attn_head_lines: "
                           f"head_dim {cfg.attn_max_lines * cfg.cols} at cols={cfg.cols}); the model's head_dim="
                           f"{c.head_dim} is {hdl} lines")
    return g


def _compile(g, qm, cfg: AccelConfig, *, kv_page: PageChoice, max_seq: int, prefill_chunk: int, act_split: bool,
             say, t0, tokenizer, metadata, quant_errors: dict, fill: bool = True, batch: int = 1) -> Artifact:
    """The passes after quantization (layout, lowering, artifact), shared by :func:`compile_model` and the
    programs-only compile (:mod:`systolica.compiler.programs_only`, ``fill=False``: no DRAM image)."""
    c = g.config
    page = kv_page.page
    say(f"layout (KV page {page} tokens, {kv_page.source})")
    max_pages = -(-max_seq // page)
    lay, img, mats, kv, rows_b = build_image(g, qm, cfg, page=page, n_pages=max_pages * batch, max_seq=max_seq,
                                             logit_rows=batch, fill=fill)
    programs, infos, stats = {}, {}, {}
    say("decode program")
    try:
        out = {"decode": _finish(_lower(g, qm, cfg, mats, kv, lay, rows_b, 1, max_pages), cfg, "decode")}
    except MemoryError_ as e:
        raise MemoryError_(f"model {c.name!r} does not fit the {cfg.name!r} accelerator even for one token: {e}") \
            from None
    graphs = {True: g, False: build_graph(c, act_split=act_split, head=False)}
    warned = False
    for kind in ("prefill", "prefill_nohead"):
        say(f"{kind} program")
        gk = graphs[PROGRAM_HEADS[kind]]
        want = min(prefill_chunk, max_seq)
        cap = q4_row_cap(gk, mats)
        if cap is not None and want > cap:
            if not warned:
                warnings.warn(f"prefill_chunk={prefill_chunk}: the prefill programs take at most {cap} rows: "
                              f"{_q4_rows_why(gk, cap)}; the runtime runs a longer prompt in chunks of up to {cap}",
                              CompileWarning, stacklevel=3)
                warned = True
            want = cap
        got = choose_chunk(lambda r, gk=gk: _lower(gk, qm, cfg, mats, kv, lay, rows_b, r, max_pages),
                           cfg, want, act_split)
        if got is not None:
            out[kind] = _finish(got, cfg, kind)
    if batch > 1:
        say("decode_batch program")
        gb = build_graph(c, act_split=act_split, head_rows="all")
        cap = q4_row_cap(gb, mats)
        if cap is not None and batch > cap:
            raise CompileError(f"batch={batch}: a batched decode step has a row a sequence, and "
                               f"{_q4_rows_why(gb, cap)}; use batch <= {cap}")
        try:
            out["decode_batch"] = _finish(_lower(gb, qm, cfg, mats, kv, lay, rows_b, batch, max_pages, batched=True),
                                          cfg, "decode_batch")
        except MemoryError_ as e:
            raise MemoryError_(f"a batched decode step of {batch} sequences does not fit the {cfg.name!r} "
                               f"accelerator: {e}; try a smaller batch") from None
    for kind, (plan, instrs, words, patches, extra) in out.items():
        rows = plan.rows
        reg = lay.add(f"program:{kind}", len(words) * WORD_BYTES, "program")
        prog = Program(words, cfg)
        base = base_state(kind, rows, page)
        programs[kind] = prog
        infos[kind] = {"rows": rows, "min_rows": 1, "region": reg.name, "instructions": len(words),
                       "patches": patches, **({"batched": True} if kind == "decode_batch" else {})}
        per_engine = Counter(i.engine.name for i in instrs)
        per_op = Counter(i.op for i in instrs)
        stats[kind] = {"rows": rows, "instructions": len(words), "per_engine": dict(per_engine),
                       "per_op": dict(per_op), "patches": len(patches), **extra,
                       **_weight_bytes(instrs, lay, cfg),
                       "onchip": {b: list(u) for b, u in plan.chip.usage().items()},
                       "tilings": {k: [t.nt, t.kt] for k, t in plan.tilings.items()}}
        infos[kind]["_base"] = base
    lay.check_fits()
    say("artifact")
    man = {
        "format": FORMAT, "version": FORMAT_VERSION, "config": cfg.to_dict(), "config_hash": cfg.hash_hex(),
        "config_hash32": cfg.hash32(),
        "model": {"name": c.name, "arch": c.arch, "dim": c.dim, "n_layers": c.n_layers, "n_heads": c.n_heads,
                  "n_kv_heads": c.n_kv_heads, "ffn_dim": c.ffn_dim, "vocab_size": c.vocab_size,
                  "max_seq": c.max_seq, "norm_eps": c.norm_eps, "rope_base": c.rope_base,
                  "tied_output": c.tied_output, "metadata": _jsonable(metadata)},
        "tokenizer": _tokenizer_json(tokenizer),
        "max_seq": max_seq, "act_split": bool(act_split), "kv": kv.to_json(), "kv_page": kv_page.to_json(),
        "regions": [r.to_json() for r in lay.regions.values()],
        "weights": _weights_json(mats, lay, cfg),
        "rows": {**rows_b, "embd_offset": lay["token_embd"].offset,
                 **({"pos_offset": lay["pos_embd"].offset} if "pos_embd" in lay.regions else {}),
                 **({"rope_offset": lay["rope"].offset} if "rope" in lay.regions else {})},
        "logits": {"offset": lay["logits"].offset, "vocab": c.vocab_size, "frac": 16, "rows": batch,
                   "row_bytes": lines_for(c.vocab_size, cfg.cols) * cfg.cols * 4},
        "image_bytes": len(img), "dram_top": lay.top,
        "programs": {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in infos.items()},
        "quant_errors": quant_errors, "stats": stats,
    }
    art = Artifact(man, programs, np.frombuffer(bytes(img), dtype=np.uint8))
    for kind, info in infos.items():  # compiled values = the first step's (position 0, token 0)
        art.programs[kind] = Program(art.patched_program(kind, info["_base"]), cfg)
    man["compile_seconds"] = round(time.perf_counter() - t0, 3)
    return art


def _weights_json(mats, lay, cfg: AccelConfig) -> dict:
    """Where every matrix lies in the weight-stream region (``systolica.wstream``): its offset ``x0`` in each
    port's stream, its padded ``Nl x Kl`` lines, and its mult row's region offset."""
    return {"region": "weights", "page": WPAGE, "ports": cfg.dma_ports,
            "port_bytes": sum(m.Nl * m.row_bytes(cfg) for m in mats.values()),
            "matrices": {n: {"x0": m.w_x0, "Nl": m.Nl, "Kl": m.Kl, "mult": m.mult_off, "wfmt": WFmt(m.wfmt).name,
                             "gshift": m.gshift} for n, m in mats.items()}}


def _weight_bytes(instrs, lay, cfg: AccelConfig) -> dict[str, int]:
    """DRAM bytes one run of a program reads of the model's parameters: ``weight_bytes`` (everything),
    ``stream_bytes`` (the int8 matrices GEMM_STREAM reads through the weight ports) and the rest loaded by LOADs
    from the weight and vector regions (mult rows, biases, norm gains)."""
    params = sorted((r.offset, r.end) for r in lay.regions.values() if r.kind in ("weight", "vector"))
    starts = [lo for lo, _ in params]

    def is_param(dram: int) -> bool:
        j = bisect_right(starts, dram) - 1
        return j >= 0 and dram < params[j][1]

    by_fmt: dict[str, int] = {}
    for i in instrs:
        if i.op == "GEMM_STREAM":
            f = WFmt(i.fields.get("wfmt", 0)).name
            by_fmt[f] = by_fmt.get(f, 0) + wstream4.stream_port_bytes(i.fields, cfg) * cfg.dma_ports
    stream = sum(by_fmt.values())
    loads = sum(i.rows * i.lines * dma_line_bytes(i.buf, cfg.cols) for i in instrs
                if i.op == "LOAD" and is_param(i.dram))
    return {"weight_bytes": stream + loads, "stream_bytes": stream, "stream_bytes_by_format": by_fmt}


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[str(k)] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) for x in v) and len(v) < 64:
            out[str(k)] = list(v)
    return out
