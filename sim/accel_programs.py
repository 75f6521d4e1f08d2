"""Programs for the top-level tests: random ones generated from the ISA table, and hand-written ones.

Random programs are *serialized*: whenever consecutive instructions run on
different engines, the first pushes a dependency token and the second pops it
(load and store talk through a compute NOP).  So every instruction runs after
the one before it in program order, whatever the timing, and the result is
defined without races -- which is what lets DRAM, status, fault code and
faulting PC of the RTL be compared bit for bit with the golden simulator.

Faults are injected from the ISA table and the fault list: illegal opcodes,
reserved bits, illegal field values and token flags, DMA outside the window or
misaligned, buffer ranges, a missing FINISH, and token deadlocks (a pop that no
push will ever match).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica import wstream4
from systolica.config import AccelConfig
from systolica.isa import OP_BY_CODE, OPCODE_BITS, WORD_BITS, Engine, Instr, encode, make
from systolica.layout import wstream_end
from systolica.numerics_int4 import GROUP

__all__ = ["RandomProgram", "random_program", "serialize", "dump_stores", "dump_bytes", "FAULT_KINDS", "weight_stream_program", "RTL_RANDOM_OPS",
           "load_store_program"]

#: Ops the random generator draws (those the RTL executes; see hw.decode.RTL_OPS).
RTL_RANDOM_OPS = ("LOAD", "STORE", "GEMM", "NOP", "ADD", "MUL", "REQUANT", "ARGMAX", "SILU", "GELU", "ROPE",
                  "QUANT", "SOFTMAX", "RMSNORM", "LAYERNORM", "ATTN", "ATTN_OUT", "GEMM_STREAM")
_OP_WEIGHTS = (0.28,  # relative weights
                0.18, 0.18, 0.04, 0.03, 0.03, 0.04, 0.03, 0.03, 0.03, 0.02, 0.04, 0.03, 0.03, 0.03, 0.04, 0.02, 0.10)

_EXEC_FAULTS = ("window", "align", "sram", "gemm_sram")
FAULT_KINDS = ("opcode", "reserved", "buf", "nop_engine", "flags", "window", "align", "sram", "gemm_sram",
               "overrun", "deadlock", "wfmt")


@dataclass
class RandomProgram:
    """Program words plus what was injected (for messages)."""

    words: list[int]
    fault: str | None
    fault_index: int | None = None
    instrs: list = field(default_factory=list)


# token flags that carry "this engine, then that one" (the first pushes, the second pops)
_SYNC = {
    (Engine.LOAD, Engine.COMPUTE): ("push_next", "pop_prev"),
    (Engine.COMPUTE, Engine.LOAD): ("push_prev", "pop_next"),
    (Engine.COMPUTE, Engine.STORE): ("push_next", "pop_prev"),
    (Engine.STORE, Engine.COMPUTE): ("push_prev", "pop_next"),
}


class _Gen:
    def __init__(self, cfg: AccelConfig, rng: np.random.Generator, data_lo: int, data_hi: int, win_size: int):
        self.cfg, self.rng = cfg, rng
        self.data_lo, self.data_hi, self.win_size = data_lo, data_hi, win_size
        # small buffer regions, so that loads, GEMMs and stores meet each other's data
        self.region = {0: min(cfg.spad_lines, 256), 1: min(cfg.acc_lines, 64), 2: min(cfg.vbuf_lines, 64)}
        self.pending: list[Instr] = []

    def lb(self, buf: int) -> int:
        return self.cfg.cols * (1 if buf == 0 else 4)

    def r(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def dma(self, op: str) -> dict:
        buf = self.r(0, 2)
        lb = self.lb(buf)
        rows, lines = self.r(1, 4), self.r(1, 6)
        stride = lines * lb + lb * self.r(0, 2) if self.rng.random() < 0.8 else lb * self.r(1, lines)
        span = (rows - 1) * stride + lines * lb
        dram = self.data_lo + lb * self.r(0, max(0, (self.data_hi - self.data_lo - span) // lb))
        sram = self.r(0, self.region[buf] - rows * lines)
        return dict(buf=buf, sram=sram, dram=dram, rows=rows, lines=lines, stride=stride)

    def gemm(self) -> dict:
        cols = self.cfg.cols
        m, k, n = self.r(1, 3), self.r(0, 3), self.r(1, 2)
        region = self.region[0]
        return dict(dst=self.r(0, self.region[1] - m * n), a=self.r(0, region - m * k),
                    w=self.r(0, region - n * cols * k), m=m, k=k, n=n, acc=self.r(0, 1))

    def gemm_stream(self) -> dict:
        """GEMM_STREAM fields with the whole weight stream (every port's pages) inside the data region: int8
        weights, or on a config with the 4-bit datapath half the time Q4_0 / Q4_1 codes (random DRAM bytes are
        codes and scales as good as any) with a random group shift."""
        cols = self.cfg.cols
        m, k, n = self.r(1, 3), self.r(0, 3), self.r(1, 2)
        fmt = {}
        if wstream4.config_problem(self.cfg) is None and self.rng.random() < 0.5:
            group = GROUP // cols  # K lines a group of 32 weights
            k = group * self.r(0, min(2, self.cfg.q4_groups))
            fmt = {"wfmt": self.r(1, 2), "gshift": self.r(0, 15)}
        region = self.region[0]
        d = dict(dst=self.r(0, self.region[1] - m * n), a=self.r(0, region - m * k), m=m, k=k, n=n,
                 acc=self.r(0, 1)) | fmt
        for _ in range(32):
            w = self.data_lo + cols * self.r(0, max(0, (self.data_hi - self.data_lo) // cols - 1))
            if k == 0 or wstream_end(d | {"w": w}, self.cfg) <= self.data_hi:
                return d | {"w": w}
        return d | {"w": self.data_lo, "k": 0}  # a region too small for this stream: a zero-K GEMM

    def vector(self, name: str) -> dict:
        """Fields of a line op; sources and destination in different halves of the region (the RTL streams
        rows through the unit, so only disjoint or identical source and destination are defined alike)."""
        half = self.region[2] // 2
        src_lo, dst_lo = (0, half) if self.rng.random() < 0.5 else (half, 0)
        rows, lines = self.r(1, 3), self.r(1, 3)
        cols = self.cfg.cols

        def at(lo: int, n: int) -> int:
            return lo + self.r(0, half - n)
        if name in ("ATTN", "ATTN_OUT"):
            nq, hd = self.r(1, 5), self.r(1, 2)  # up to 5 rows: jobs of attn_rows rows and a shorter last one
            state = at(src_lo, nq + nq * hd)
            if name == "ATTN_OUT":
                return dict(dst=at(dst_lo, nq * hd), state=state, nq=nq, hd=hd)
            sp = self.region[0]

            def tile(init: int) -> dict:
                page_log2 = self.r(0, 3)
                p = 1 << page_log2
                return dict(q=sp // 2 + self.r(0, sp // 4 - nq * hd), qexp=3 * sp // 4 + self.r(0, sp // 4 - nq),
                            kv=self.r(0, sp // 2 - (2 * hd + 2) * p), state=state, nq=nq, hd=hd, t=self.r(0, p),
                            page_log2=page_log2, offset=self.r(-2, p + 2), causal=self.r(0, 1), init=init)
            # a running state only ever comes from init=1 (its l >= 0); the next tiles continue it
            self.pending += [make("ATTN", **tile(0)) for _ in range(self.r(0, 2))]
            return tile(1)
        if name == "QUANT":
            split = self.r(0, 1)
            k = 1 + split
            lines = self.r(0, 3)
            sp = self.region[0] // 2  # q lines and exponent lines in different halves of the scratchpad region
            return dict(dst=self.r(0, sp - k * rows * lines), src=at(src_lo, rows * lines),
                        exps=sp + self.r(0, sp - k * rows), rows=rows, lines=lines, split=split)
        if name in ("SOFTMAX", "RMSNORM", "LAYERNORM"):
            n = self.r(0, 3 * cols)
            lpr = -(-n // cols)
            d = dict(dst=at(dst_lo, rows * lpr), src=at(src_lo, rows * lpr), rows=rows, n=n)
            if name != "SOFTMAX":
                d |= dict(gamma=at(src_lo, (2 if name == "LAYERNORM" else 1) * lpr), eps=self.r(0, (1 << 24) - 1))
            return d
        if name == "ROPE":
            heads, hd = self.r(1, 2), self.r(1, 3)
            return dict(dst=at(dst_lo, rows * heads * hd), src=at(src_lo, rows * heads * hd),
                        table=at(src_lo, rows * hd), rows=rows, heads=heads, hd=hd)
        if name == "ARGMAX":
            n = self.r(0, 3 * cols)
            lpr = -(-n // cols)
            return dict(dst=at(dst_lo, rows), src=at(src_lo, rows * lpr), rows=rows, n=n)
        d = dict(dst=at(dst_lo, rows * lines), rows=rows, lines=lines)
        if name in ("SILU", "GELU"):
            if self.rng.random() < 0.2:  # in place is defined too
                return d | dict(src=d["dst"])
            return d | dict(src=at(src_lo, rows * lines))
        if name == "REQUANT":
            return d | dict(src=self.r(0, self.region[1] - rows * lines), mult=at(src_lo, lines),
                            exps=self.r(0, self.region[0] - rows), shift=self.r(0, 40))
        bcast = self.r(0, 1)
        d |= dict(a=at(src_lo, rows * lines), b=at(src_lo, lines if bcast else rows * lines), bcast=bcast)
        if name == "MUL":
            d["shift"] = self.r(0, 63)
        return d

    def op(self) -> Instr:
        if self.pending:  # the continuation tiles of an ATTN chain
            return self.pending.pop(0)
        w = np.asarray(_OP_WEIGHTS, dtype=np.float64)
        if not self.cfg.softmax_unit:  # an op the config does not build (ILLEGAL_OPCODE): not drawn
            w = np.where(np.array(RTL_RANDOM_OPS) == "SOFTMAX", 0.0, w)
        name = RTL_RANDOM_OPS[int(self.rng.choice(len(RTL_RANDOM_OPS), p=w / w.sum()))]
        if name in ("LOAD", "STORE"):
            return make(name, **self.dma(name))
        if name == "GEMM":
            return make("GEMM", **self.gemm())
        if name == "GEMM_STREAM":
            return make("GEMM_STREAM", **self.gemm_stream())
        if name == "NOP":
            return make("NOP", engine=self.r(0, 2))
        return make(name, **self.vector(name))


def _with_flags(ins: Instr, **flags: bool) -> Instr:
    f = ins.flags()
    f.update({k: f[k] or v for k, v in flags.items()})
    return Instr(ins.op, dict(ins.fields), **f)


def serialize(ops: list[Instr]) -> list[Instr]:
    """Insert token flags (and bridging compute NOPs) so that each instruction follows the previous one."""
    out: list[Instr] = []
    for ins in ops:
        if out and out[-1].engine != ins.engine:
            pair = (out[-1].engine, ins.engine)
            if pair not in _SYNC:  # load <-> store: through a compute NOP
                push, pop = _SYNC[(out[-1].engine, Engine.COMPUTE)]
                out[-1] = _with_flags(out[-1], **{push: True})
                out.append(_with_flags(make("NOP", engine=int(Engine.COMPUTE)), **{pop: True}))
                pair = (Engine.COMPUTE, ins.engine)
            push, pop = _SYNC[pair]
            out[-1] = _with_flags(out[-1], **{push: True})
            ins = _with_flags(ins, **{pop: True})
        out.append(ins)
    return out


def _inject(g: _Gen, kind: str) -> tuple[Instr | int, bool]:
    """A faulty instruction (or raw word) of the given kind; second item: True if it is a raw word."""
    cfg, rng = g.cfg, g.rng
    if kind == "opcode":
        bad = [c for c in range(1 << OPCODE_BITS) if c not in OP_BY_CODE]
        word = int(rng.choice(bad)) | (int(rng.integers(0, 1 << 62)) << OPCODE_BITS)
        return word, True
    if kind == "reserved":
        ins = g.op()
        while ins.spec.used_bits >= WORD_BITS:  # GEMM_STREAM's fields fill the word: no reserved bit to set
            ins = g.op()
        used = ins.spec.used_bits
        return encode(ins) | (1 << int(rng.integers(used, WORD_BITS))), True
    if kind == "buf":
        d = g.dma("LOAD")
        d["buf"] = 3
        return make(str(rng.choice(["LOAD", "STORE"])), **d), False
    if kind == "nop_engine":
        return make("NOP", engine=3), False
    if kind == "flags":
        if rng.random() < 0.5:
            return make("LOAD", **g.dma("LOAD"), **{str(rng.choice(["pop_prev", "push_prev"])): True}), False
        return make("STORE", **g.dma("STORE"), **{str(rng.choice(["pop_next", "push_next"])): True}), False
    if kind == "window" and rng.random() < 0.25:  # the last weight port's pages run past the window
        d = g.gemm_stream()
        d["k"] = max(d["k"], 1)
        d["w"] = g.win_size - cfg.cols * g.r(1, 2)  # past the end: one port reads >= cols*cols >= 2*cols bytes, or port 1 starts a page later
        return make("GEMM_STREAM", **d), False
    if kind == "align" and rng.random() < 0.25:
        d = g.gemm_stream()
        d["w"] += g.r(1, cfg.cols - 1)
        return make("GEMM_STREAM", **d), False
    if kind == "window":
        d = g.dma("LOAD")
        lb = g.lb(d["buf"])
        d["dram"] = g.win_size - lb * g.r(0, 2)  # runs past the end (or starts past it)
        d["dram"] -= d["dram"] % lb
        if rng.random() < 0.3:
            d["dram"], d["stride"] = 0, (g.win_size // d["rows"] // lb + 1) * lb
            d["rows"] = max(d["rows"], 2)
        return make(str(rng.choice(["LOAD", "STORE"])), **d), False
    if kind == "align":
        d = g.dma("LOAD")
        if rng.random() < 0.5:
            d["dram"] += g.r(1, g.lb(d["buf"]) - 1)
        else:
            d["stride"] += g.r(1, g.lb(d["buf"]) - 1)
        return make(str(rng.choice(["LOAD", "STORE"])), **d), False
    if kind == "sram":
        d = g.dma("LOAD")
        total = d["rows"] * d["lines"]
        size = {0: cfg.spad_lines, 1: cfg.acc_lines, 2: cfg.vbuf_lines}[d["buf"]]
        d["sram"] = min(size - total + g.r(1, total), (1 << 16) - 1)
        return make(str(rng.choice(["LOAD", "STORE"])), **d), False
    if kind == "wfmt":  # a weight format field no executor accepts: wfmt=3, or a group shift on int8 weights
        d = g.gemm_stream()
        d["wfmt"], d["gshift"] = (3, 0) if rng.random() < 0.5 else (0, g.r(1, 15))
        if wstream4.config_problem(cfg) is None and rng.random() < 0.4:  # 4-bit weights the array cannot take
            d["wfmt"], d["gshift"] = g.r(1, 2), g.r(0, 15)
            d["k"], d["m"] = (GROUP // cfg.cols + 1, d["m"]) if rng.random() < 0.5 else (GROUP // cfg.cols, 65)
            if d["k"] % (GROUP // cfg.cols) == 0:  # L = 1 (cols = 32): k is always whole groups; too many rows
                d["m"] = wstream4.MAX_ROWS + 1
        return make("GEMM_STREAM", **d), False
    if kind == "gemm_sram":
        gm = g.gemm()
        gm["k"] = max(gm["k"], 1)
        which = str(rng.choice(["a", "w", "dst"]))
        gm[which] = {"a": cfg.spad_lines, "w": cfg.spad_lines, "dst": cfg.acc_lines}[which] - g.r(0, 1)
        return make("GEMM", **gm), False
    raise ValueError(f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}")


def dump_stores(cfg: AccelConfig, at: int) -> list[Instr]:
    """STOREs of the buffer regions random programs use, to DRAM from ``at`` (``DUMP_BYTES`` bytes)."""
    g = _Gen(cfg, np.random.default_rng(0), 0, 0, 0)
    out, addr = [], at
    for buf in (0, 1, 2):
        lb, n = g.lb(buf), g.region[buf]
        out.append(make("STORE", buf=buf, sram=0, dram=addr, rows=1, lines=n, stride=n * lb))
        addr += n * lb
    return out


def dump_bytes(cfg: AccelConfig) -> int:
    g = _Gen(cfg, np.random.default_rng(0), 0, 0, 0)
    return sum(g.lb(b) * g.region[b] for b in (0, 1, 2))


def random_program(cfg: AccelConfig, rng: np.random.Generator, *, n_ops: int, data_lo: int, data_hi: int,
                   win_size: int, fault: str | None = None, dump_at: int | None = None) -> RandomProgram:
    """A serialized random program of about ``n_ops`` operations, optionally with one injected fault.

    DMA addresses stay in ``[data_lo, data_hi)`` of the window (the program lives below ``data_lo``),
    except for the injected ``window`` fault.  ``dump_at``: end with STOREs of every buffer region the
    program may have touched (:func:`dump_stores`), so that all of its results reach DRAM and are compared.
    """
    g = _Gen(cfg, rng, data_lo, data_hi, win_size)
    ops = [g.op() for _ in range(n_ops)]
    fault_index = None
    if fault in _EXEC_FAULTS:
        # an execution fault is serialized like any instruction: the golden simulator checks these when the
        # instruction executes, the RTL when it decodes it; after all earlier instructions both are the same
        bad, _ = _inject(g, fault)
        fault_index = int(rng.integers(0, len(ops) + 1))
        ops.insert(fault_index, bad)
    if dump_at is not None:
        ops += dump_stores(cfg, dump_at)
    instrs = serialize(ops)
    if fault == "deadlock":
        # a pop no push will ever match: on a compute instruction waiting for the store engine,
        # or a load instruction waiting for compute, placed where nothing later pushes there
        i = int(rng.integers(0, len(instrs)))
        ins = instrs[i]
        flag = {Engine.LOAD: "pop_next", Engine.COMPUTE: str(rng.choice(["pop_prev", "pop_next"])),
                Engine.STORE: "pop_prev"}[ins.engine]
        instrs[i] = _with_flags(ins, **{flag: True})
        fault_index = i
    words: list[int] = [encode(i) for i in instrs]
    if fault is None or fault == "deadlock" or fault in _EXEC_FAULTS:
        words.append(encode(make("FINISH")))
    elif fault == "overrun":
        pass
    else:  # decode faults: a raw word anywhere (both stop dispatch there and drain what came before)
        bad, raw = _inject(g, fault)
        fault_index = int(rng.integers(0, len(words) + 1))
        words.insert(fault_index, bad if raw else encode(bad))
        words.append(encode(make("FINISH")))
    return RandomProgram(words, fault, fault_index, instrs)


def weight_stream_program(cfg: AccelConfig, *, k_lines: int, n_tiles: int, n_lines: int, w_dram: int,
                          a_dram: int, out_dram: int) -> list[Instr]:
    """Decode-style GEMV with weights streamed tile by tile into two scratchpad slots (double buffering).

    Tile t holds ``n_lines * cols`` weight rows of ``k_lines`` lines; LOAD of tile t+2 waits for the GEMM of
    tile t to release its slot (compute->load token), GEMM t waits for its LOAD (load->compute token).
    The activation row is loaded once; the result (1 row of n_tiles*n_lines lines) is stored at the end.
    """
    cols = cfg.cols
    tile_lines = n_lines * cols * k_lines
    a_sram = 0
    slots = (k_lines, k_lines + tile_lines)
    if slots[1] + tile_lines > cfg.spad_lines:
        raise ValueError(f"two weight tiles of {tile_lines} lines do not fit the {cfg.spad_lines}-line scratchpad")
    prog = [make("LOAD", buf=0, sram=a_sram, dram=a_dram, rows=1, lines=k_lines, stride=k_lines * cols,
                 push_next=True)]
    tile_bytes = tile_lines * cols
    for t in range(n_tiles):
        # the first two slots are free; later loads wait for the GEMM two tiles back
        prog.append(make("LOAD", buf=0, sram=slots[t % 2], dram=w_dram + t * tile_bytes, rows=1, lines=tile_lines,
                         stride=tile_bytes, pop_next=t >= 2, push_next=True))
    prog.insert(1, make("NOP", engine=int(Engine.COMPUTE), pop_prev=True))  # the activation row is in
    gemms = []
    for t in range(n_tiles):
        gemms.append(make("GEMM", dst=t * n_lines, a=a_sram, w=slots[t % 2], m=1, k=k_lines, n=n_lines, acc=0,
                          pop_prev=True, push_prev=t + 2 < n_tiles, push_next=t == n_tiles - 1))
    # program order: the NOP, then loads and GEMMs interleaved so that fetch never waits on a full queue
    out = [prog[0], prog[1]]
    loads = prog[2:]
    for t in range(n_tiles):
        out.append(loads[t])
        out.append(gemms[t])
    out.append(make("STORE", buf=1, sram=0, dram=out_dram, rows=1, lines=n_tiles * n_lines,
                    stride=n_tiles * n_lines * cols * 4, pop_prev=True))
    out.append(make("FINISH"))
    return out


def load_store_program(cfg: AccelConfig, *, data: int, out: int, chunk: int = 0x1000, loads: int = 3) -> list[Instr]:
    """``loads`` LOADs of ``chunk`` bytes each from ``data`` into the scratchpad, then one STORE of all of them
    to ``out``: long transfers of many bursts, each transfer waiting for the one before (DRAM latency tests)."""
    lines = chunk // cfg.cols
    if loads * lines > cfg.spad_lines:
        raise ValueError(f"{loads} x {chunk} bytes do not fit the {cfg.spad_lines}-line scratchpad")
    prog = [make("LOAD", buf=0, sram=i * lines, dram=data + i * chunk, rows=1, lines=lines, stride=chunk,
                 push_next=i == loads - 1) for i in range(loads)]
    return prog + [make("NOP", engine=int(Engine.COMPUTE), pop_prev=True, push_next=True),
                   make("STORE", buf=0, sram=0, dram=out, rows=1, lines=loads * lines, stride=loads * chunk,
                        pop_prev=True),
                   make("FINISH")]


def concurrent_program(cfg: AccelConfig, *, data_lo: int, out_at: int, rounds: int = 4) -> list[Instr]:
    """LOAD, compute and STORE at once on disjoint regions of every buffer: the buffer ports' arbitration.

    Compute writes the scratchpad (QUANT), the accumulator (GEMM read-modify-write) and the vector buffer
    (ADD) while LOAD writes other lines of the same buffers (its lines wait for the write port) and STORE
    reads lines that compute reads too (its reads wait for the read port).  The regions are disjoint, so the
    result does not depend on the interleaving and the golden simulator gives it.  Needs ``cols >= 4`` and
    buffers of at least 384 / 128 / 192 lines; ``data_lo`` holds 7 KiB of input, ``out_at`` takes 8 KiB.
    """
    cols = cfg.cols
    lb = {0: cols, 1: 4 * cols, 2: 4 * cols}
    if cfg.spad_lines < 384 or cfg.acc_lines < 128 or cfg.vbuf_lines < 192:
        raise ValueError(f"config {cfg.name!r} has too small buffers for the concurrent program")

    def dma(op, buf, sram, lines, dram, **flags):
        return make(op, buf=buf, sram=sram, dram=dram, rows=1, lines=lines, stride=lines * lb[buf], **flags)

    setup = [dma("LOAD", 0, 0, 64, data_lo), dma("LOAD", 1, 0, 16, data_lo + 0x400),
             dma("LOAD", 2, 0, 32, data_lo + 0x800, push_next=True)]
    prog = setup + [make("NOP", engine=int(Engine.COMPUTE), pop_prev=True, push_next=True)]
    prog += [dma("LOAD", 2, 128, 64, data_lo + 0xC00), dma("LOAD", 1, 64, 64, data_lo + 0x1000),
             dma("LOAD", 0, 128, 256, data_lo + 0x1400, push_next=True)]
    prog += [dma("STORE", 0, 0, 64, out_at, pop_prev=True), dma("STORE", 2, 0, 32, out_at + 0x100),
             dma("STORE", 1, 0, 16, out_at + 0x300)]
    for _ in range(rounds):
        prog += [make("GEMM", dst=16, a=0, w=8, m=2, k=2, n=2, acc=1),
                 make("QUANT", dst=64, src=0, exps=96, rows=2, lines=4, split=0),
                 make("ADD", dst=64, a=0, b=16, rows=2, lines=8, bcast=0)]
    prog.append(make("NOP", engine=int(Engine.COMPUTE), pop_prev=True, push_next=True))
    prog += [dma("STORE", 0, 0, 384, out_at + 0x400, pop_prev=True), dma("STORE", 1, 0, 128, out_at + 0xA00),
             dma("STORE", 2, 0, 192, out_at + 0x1200)]
    return prog + [make("FINISH")]
