"""Fusion of repeated instruction blocks in a plan: one numpy computation for G copies of a block.

A compiled linear layer is a run of identical blocks in the execution order, one per tile of
output channels: LOAD the tile's multipliers and weights, GEMM, REQUANT, ADD (and SILU, MUL in
the MLP).  Block ``j`` differs from block 0 only in its addresses, by ``j`` times a constant per
field.  When every operand a block reads is either written earlier in the *same* block (the
same lines for every ``j``) or not written by the run of blocks at all, the blocks are
independent apart from the buffer lines they reuse, and the run computes, exactly:

- every op of the block once over all ``G`` blocks (a leading batch axis; the GEMM of all
  weight tiles against one activation block is a single BLAS call, its weights read straight
  from DRAM, which no op of the run writes);
- then the buffer lines the run leaves behind, written in sequential order: every block's
  lines where the address moves with ``j``, the last block's where it does not (earlier
  blocks' values there are overwritten by the later blocks in the per-instruction order too).

The ops and integer formulas are those of :mod:`systolica.sim.golden_plan`, on arrays with a
batch axis; a REQUANT whose shifts leave 1..63 falls back to ``numerics.requant`` per block.
Only LOAD, GEMM (``acc=0``), REQUANT, ADD, MUL and SILU are fused; a block with anything
else, or any doubt about a dependency, is left to the per-instruction closures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica.isa import Buf, Instr

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim

__all__ = ["fuse_order", "MIN_BLOCKS"]

_I64 = np.int64
MIN_BLOCKS = 2  # runs of fewer blocks stay per instruction
_MAX_PERIOD = 40  # a prefill tile: 2 LOADs, a GEMM and one REQUANT per row (7 rows x 2)
_BUFS = {Buf.SPAD: "spad", Buf.ACC: "acc", Buf.VBUF: "vbuf"}
# per fusable op: the address fields (may move by a constant per block); every other field must be equal
_ADDR = {"LOAD": ("sram", "dram"), "STORE": ("sram", "dram"), "GEMM": ("dst", "a", "w"), "REQUANT": ("dst", "src", "mult", "exps"),
         "ADD": ("dst", "a", "b"), "MUL": ("dst", "a", "b"), "SILU": ("dst", "src")}


def _shape_sig(ins: Instr):
    addr = _ADDR.get(ins.op)
    if addr is None or (ins.op == "GEMM" and (ins.acc or ins.k == 0 or not ins.m or not ins.n)):
        return None
    if ins.op in ("LOAD", "STORE") and not (ins.rows and ins.lines):
        return None
    if ins.op == "STORE" and ins.rows > 1 and ins.stride < ins.lines * _line_bytes(ins):
        return None  # overlapping rows: written in order by the per-instruction path
    return (ins.op, *sorted((k, v) for k, v in ins.fields.items() if k not in addr))


def _line_bytes(ins: Instr) -> int:
    return 1 if ins.buf == Buf.SPAD else 4  # times cols


def _regions(sim: GoldenSim, ins: Instr, f: dict) -> tuple[list[tuple], tuple]:
    """Reads ``[(name, buf, start, lines)]`` and the write ``(buf, start, lines)`` of a fusable op."""
    cols = sim.cfg.cols
    op = ins.op
    if op == "LOAD":
        return [], (_BUFS[Buf(ins.buf)], f["sram"], ins.rows * ins.lines)
    if op == "STORE":  # writes DRAM only (checked apart from the buffers)
        return [("sram", _BUFS[Buf(ins.buf)], f["sram"], ins.rows * ins.lines)], ("", 0, 0)
    if op == "GEMM":
        m, k, n = ins.m, ins.k, ins.n
        return [("a", "spad", f["a"], m * k), ("w", "spad", f["w"], n * cols * k)], ("acc", f["dst"], m * n)
    rows, lines = ins.rows, ins.lines
    if op == "REQUANT":
        return [("src", "acc", f["src"], rows * lines), ("mult", "vbuf", f["mult"], lines),
                ("exps", "spad", f["exps"], rows)], ("vbuf", f["dst"], rows * lines)
    if op in ("ADD", "MUL"):
        return [("a", "vbuf", f["a"], rows * lines), ("b", "vbuf", f["b"], lines if ins.bcast else rows * lines)], \
            ("vbuf", f["dst"], rows * lines)
    return [("src", "vbuf", f["src"], rows * lines)], ("vbuf", f["dst"], rows * lines)


def _overlap(a0: int, an: int, b0: int, bn: int) -> bool:
    return an > 0 and bn > 0 and a0 < b0 + bn and b0 < a0 + an


class _Group:
    """G blocks of P instructions, checked; builds the fused closure."""

    def __init__(self, sim: GoldenSim, blocks: list[list[Instr]]):
        self.sim, self.blocks = sim, blocks
        self.G, self.P = len(blocks), len(blocks[0])
        b0, b1 = blocks[0], blocks[1]
        self.delta = [{f: b1[k].fields[f] - b0[k].fields[f] for f in _ADDR[b0[k].op]} for k in range(self.P)]

    def check(self) -> bool:
        """Affine addresses in every block, and every read resolvable (own block, or untouched by the run)."""
        sim, G, P, blocks = self.sim, self.G, self.P, self.blocks
        for j, blk in enumerate(blocks):
            for k, ins in enumerate(blk):
                b0 = blocks[0][k]
                if any(ins.fields[f] != b0.fields[f] + j * d for f, d in self.delta[k].items()):
                    return False
        # lines written by the run, per buffer
        written = {name: np.zeros(getattr(sim, name).shape[0], bool) for name in ("spad", "acc", "vbuf")}
        self.reads, self.writes = [], []  # per k: [(name, source)], (buf, start0, lines, delta)
        for k in range(P):
            ins = blocks[0][k]
            reads, (wb, ws, wn) = _regions(sim, ins, ins.fields)
            if ins.op == "STORE":
                self.writes.append(("", 0, 0, 0))
                continue
            wd = self.delta[k]["sram" if ins.op == "LOAD" else "dst"]
            if ins.op == "LOAD" and self.delta[k]["dram"] < 0:
                return False
            if wd < 0 or ws + (G - 1) * wd + wn > written[wb].size:
                return False
            self.writes.append((wb, ws, wn, wd))
            for j in range(G):
                written[wb][ws + j * wd:ws + j * wd + wn] = True
        self.written = written
        if not self._dram_apart():
            return False
        deps: list[set[int]] = [set() for _ in range(P)]
        for k in range(P):
            ins = blocks[0][k]
            reads, _ = _regions(sim, ins, ins.fields)
            resolved = []
            for name, buf, s, n in reads:
                src = self._resolve(k, buf, s, n, self.delta[k][name])
                if src is None:
                    return False
                if src[0] in ("own", "carry"):
                    deps[k].add(src[1])
                resolved.append((name, src))
            self.reads.append(resolved)
        # evaluate the batched ops so that every op comes after the ops whose values it reads
        self.eval_order, state = [], [0] * P  # 0 new, 1 visiting, 2 done

        def visit(k: int) -> bool:
            if state[k] == 1:
                return False  # a recurrence between blocks: not a batch
            if state[k] == 0:
                state[k] = 1
                if not all(visit(d) for d in deps[k]):
                    return False
                state[k] = 2
                self.eval_order.append(k)
            return True

        if any(k in deps[k] for k in range(P)):
            return False  # an op reading what it wrote in the block before: a recurrence
        return all(visit(k) for k in range(P))

    def _dram_span(self, k: int) -> tuple[int, int]:
        """The DRAM bytes op ``k`` touches over all blocks, as one interval."""
        ins, d = self.blocks[0][k], self.delta[k]["dram"]
        row_bytes = ins.lines * _line_bytes(ins) * self.sim.cfg.cols
        span = (ins.rows - 1) * ins.stride + row_bytes
        lo = ins.dram + min(0, (self.G - 1) * d)
        return lo, ins.dram + max(0, (self.G - 1) * d) + span

    def _dram_apart(self) -> bool:
        """The run's STOREs write no DRAM byte its LOADs read, and move forward (so they can be told apart)."""
        ops = [ins.op for ins in self.blocks[0]]
        stores = [self._dram_span(k) for k, op in enumerate(ops) if op == "STORE"]
        if not stores:
            return True
        if any(self.delta[k]["dram"] < 0 for k, op in enumerate(ops) if op == "STORE"):
            return False
        loads = [self._dram_span(k) for k, op in enumerate(ops) if op == "LOAD"]
        return not any(_overlap(a, b - a, c, d - c) for a, b in stores for c, d in loads)

    def _hits(self, s: int, n: int, d: int, kw: int, lag: int) -> bool:
        """Whether op ``kw``'s write in block ``j - lag`` overlaps the read ``[s + j*d, +n)`` for some ``j``."""
        wb, ws, wn, wd = self.writes[kw]
        if d == wd:
            return _overlap(s + lag * d, n, ws, wn)
        return any(_overlap(s + j * d, n, ws + (j - lag) * wd, wn) for j in range(lag, self.G))

    def _resolve(self, k: int, buf: str, s: int, n: int, d: int):
        """Where op ``k``'s read of ``[s + j*d, +n)`` of ``buf`` comes from, or ``None`` when not batchable.

        ``("own", kw, off, n)``: op ``kw`` of the same block wrote it; ``("carry", kw, off, n, s, d)``: op
        ``kw`` of the previous block (block 0 reads the lines as they were); ``("ext", buf, s, n, d)``: the run
        never writes those lines.
        """
        P, G = self.P, self.G
        for kw in range(k - 1, -1, -1):  # the latest writer before k in the same block
            wb, ws, wn, wd = self.writes[kw]
            if wb != buf or not self._hits(s, n, d, kw, 0):
                continue
            if wd != d or not (ws <= s and s + n <= ws + wn):
                return None
            return ("own", kw, s - ws, n)
        for kw in range(P - 1, -1, -1):  # else the latest writer in the previous block
            wb, ws, wn, wd = self.writes[kw]
            if wb != buf or G < 2 or not self._hits(s, n, d, kw, 1):
                continue
            off = s + d - ws
            if wd != d or not (off >= 0 and off + n <= wn) or d < 0:
                return None
            if s + n > self.written[buf].size:
                return None
            return ("carry", kw, off, n, s, d)
        if d < 0 or s + (G - 1) * d + n > self.written[buf].size:
            return None
        w = self.written[buf]
        if any(w[s + j * d:s + j * d + n].any() for j in range(G)):
            return None  # written two or more blocks back, or later in the block
        return ("ext", buf, s, n, d)

    # -------------------------------------------------------------- closure
    def build(self) -> Callable[[], None]:
        sim, G, P = self.sim, self.G, self.P
        cols = sim.cfg.cols
        steps = []
        for k in self.eval_order:
            ins = self.blocks[0][k]
            getters = {name: self._getter(src) for name, src in self.reads[k]}
            steps.append((k, _BATCHED[ins.op](sim, ins, self.delta[k], getters, G, cols)))
        # commits in sequential (block, op) order; an op whose lines do not move keeps only the last block's
        commits = []
        for j in range(G):
            for k in range(P):
                ins = self.blocks[j][k]
                if ins.op == "STORE":  # DRAM rows of block j, in order (a later STORE wins where they meet)
                    lb = _line_bytes(ins) * cols
                    rb = ins.lines * lb
                    dst = np.lib.stride_tricks.as_strided(sim.window[ins.dram:], shape=(ins.rows, rb),
                                                          strides=(ins.stride, 1)) if ins.rows > 1 else \
                        sim.window[ins.dram:ins.dram + rb].reshape(1, rb)
                    commits.append((dst, k, j, True))
                    continue
                wb, ws, wn, wd = self.writes[k]
                if wd == 0 and j != G - 1:
                    continue
                dst = getattr(sim, wb)[ws + j * wd:ws + j * wd + wn]
                commits.append((dst, k, j, False))
        outs: list = [None] * P

        def run() -> None:
            for k, step in steps:
                outs[k] = step(outs)
            for dst, k, j, to_dram in commits:
                if to_dram:  # buffer lines as little-endian bytes (int8 lines are the bytes themselves)
                    v = np.ascontiguousarray(outs[k][j])
                    np.copyto(dst, v.astype(v.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(dst.shape))
                else:
                    np.copyto(dst, outs[k][j], casting="unsafe")

        return run

    def _getter(self, src) -> Callable[[list], np.ndarray]:
        """A function of the outputs so far giving the operand as ``(G, lines, cols)``."""
        if src[0] == "own":
            _, kw, off, n = src
            return lambda outs: outs[kw][:, off:off + n]
        if src[0] == "carry":
            _, kw, off, n, s, _d = src
            arr = getattr(self.sim, self.writes[kw][0])
            first = arr[s:s + n]  # block 0 reads the lines as the run found them
            G = self.G

            return lambda outs: _Carry(first, outs[kw][:G - 1, off:off + n])
        _, buf, s, n, d = src
        arr = getattr(self.sim, buf)
        view = np.lib.stride_tricks.as_strided(arr[s:], shape=(self.G, n, arr.shape[1]),
                                               strides=(d * arr.strides[0], arr.strides[0], arr.strides[1]),
                                               writeable=False)
        return lambda outs: view


# ------------------------------------------------------------------ batched ops
class _Carry:
    """An operand of G blocks whose block 0 is ``first`` and blocks 1.. are ``rest`` (no copy made)."""

    __slots__ = ("first", "rest")

    def __init__(self, first: np.ndarray, rest: np.ndarray):
        self.first, self.rest = first, rest

    def full(self) -> np.ndarray:
        return np.concatenate([self.first[None], self.rest])

    def blocks(self, c: int, g: int) -> list[np.ndarray]:
        """Blocks ``c .. c+g-1`` as one or two arrays of consecutive blocks."""
        if c > 0:
            return [self.rest[c - 1:c - 1 + g]]
        return [self.first[None]] + ([self.rest[:g - 1]] if g > 1 else [])


def _full(x) -> np.ndarray:
    return x.full() if isinstance(x, _Carry) else x


def _b_load(sim, ins, delta, get, G, cols):
    lb = cols if ins.buf == Buf.SPAD else 4 * cols
    rows, lines, stride = ins.rows, ins.lines, ins.stride
    row_bytes = lines * lb
    dram0, ddelta = ins.fields["dram"], delta["dram"]  # >= 0 (checked)
    win = sim.window
    dt = np.int8 if ins.buf == Buf.SPAD else np.dtype("<i4")
    if rows == 1 or stride == row_bytes:  # the DRAM bytes of a block are the buffer lines as they are
        raw = np.lib.stride_tricks.as_strided(win[dram0:], shape=(G, rows * row_bytes), strides=(ddelta, 1),
                                              writeable=False)
        view = raw.view(dt).reshape(G, rows * lines, cols)
        return lambda outs: view
    raw = np.lib.stride_tricks.as_strided(win[dram0:], shape=(G, rows, row_bytes), strides=(ddelta, stride, 1),
                                          writeable=False)
    return lambda outs: np.ascontiguousarray(raw).view(dt).reshape(G, rows * lines, cols)


_SCRATCH = 1 << 18  # elements of the float buffer weight tiles are converted into (1-2 MB: stays in cache)


def _scratch(sim: GoldenSim, ft, n: int) -> np.ndarray:
    """``n`` elements of the simulator's conversion buffer of type ``ft``, shared by its fused GEMMs (one runs
    at a time)."""
    bufs = sim.__dict__.setdefault("_fuse_scratch", {})
    buf = bufs.get(ft)
    if buf is None or buf.size < n:
        buf = bufs[ft] = np.empty(max(n, _SCRATCH), ft)
    return buf[:n]


def _b_gemm(sim, ins, delta, get, G, cols):
    m, k, n = ins.m, ins.k, ins.n
    kk, nn = k * cols, n * cols
    if kk * (1 << 14) > 1 << 53:
        return None
    ft = np.float32 if kk * (1 << 14) <= 1 << 24 else np.float64
    ga, gw = get["a"], get["w"]
    chunk = max(1, _SCRATCH // max(nn * kk, 1))  # weight tiles converted at a time
    af = np.empty((m, kk), ft)
    res = np.empty((m, G * nn), ft)

    def run(outs):
        a, w = _full(ga(outs)), gw(outs)  # (G, m*k, cols), (G, nn*k, cols)
        wf = _scratch(sim, ft, chunk * nn * kk).reshape(chunk * nn, kk)
        shared = a.strides[0] == 0
        if shared:
            np.copyto(af, a[0].reshape(m, kk))
        else:
            abatch = a.reshape(G, m, kk).astype(ft)
        for c in range(0, G, chunk):
            g = min(chunk, G - c)
            wc = wf[:g * nn]
            at = 0
            for part in (w.blocks(c, g) if isinstance(w, _Carry) else [w[c:c + g]]):
                rows_ = part.shape[0] * nn
                np.copyto(wc[at:at + rows_], part.reshape(rows_, kk))  # int8 -> float, a chunk at a time
                at += rows_
            if shared:
                np.matmul(af, wc.T, out=res[:, c * nn:(c + g) * nn])
            else:
                for i in range(g):
                    np.matmul(abatch[c + i], wc[i * nn:(i + 1) * nn].T, out=res[:, (c + i) * nn:(c + i + 1) * nn])
        out = res.reshape(m, G, nn).transpose(1, 0, 2)  # (G, m, nn): exact integers
        if ft == np.float32:
            r = out.astype(np.int32)
        else:
            r64 = out.astype(_I64)
            r = (r64 & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        return r.reshape(G, m * n, cols)

    return run


def _b_requant(sim, ins, delta, get, G, cols):
    rows, lines, shift = ins.rows, ins.lines, ins.shift
    L = lines * cols
    gs, gm, ge = get["src"], get["mult"], get["exps"]

    def run(outs):
        src = _full(gs(outs)).reshape(G, rows, L)
        mult = _full(gm(outs)).reshape(G, 1, L)
        e = _full(ge(outs))[:, :, 0].astype(_I64)  # (G, rows)
        s = (shift - e)[:, :, None]
        if s.size == 0 or (s.min() >= 1 and s.max() <= 63):  # (no rows: a row a batched step leaves empty)
            p = src.astype(_I64) * mult
            np.right_shift(p, s - 1, out=p)
            np.add(p, 1, out=p)
            np.right_shift(p, 1, out=p)
            np.maximum(p, nx.INT32_MIN, out=p)
            np.minimum(p, nx.INT32_MAX, out=p)
            return p.astype(np.int32).reshape(G, rows * lines, cols)
        return np.stack([nx.requant(src[j], mult[j, 0], e[j], shift) for j in range(G)]).reshape(G, rows * lines,
                                                                                                  cols)

    return run


def _b_binary(sim, ins, delta, get, G, cols):
    rows, lines = ins.rows, ins.lines
    L = lines * cols
    ga, gb = get["a"], get["b"]
    bcast, op, shift = bool(ins.bcast), ins.op, getattr(ins, "shift", 0) if ins.op == "MUL" else 0

    def run(outs):
        a = _full(ga(outs)).reshape(G, rows, L).astype(_I64)
        b = _full(gb(outs)).reshape(G, 1 if bcast else rows, L)
        if op == "ADD":
            p = a + b
        else:
            p = a * b
            if shift >= 64:
                p[...] = 0
            elif shift > 0:
                np.right_shift(p, shift - 1, out=p)
                np.add(p, 1, out=p)
                np.right_shift(p, 1, out=p)
        np.maximum(p, nx.INT32_MIN, out=p)
        np.minimum(p, nx.INT32_MAX, out=p)
        return p.astype(np.int32).reshape(G, rows * lines, cols)

    return run


def _b_silu(sim, ins, delta, get, G, cols):
    rows, lines = ins.rows, ins.lines
    gsrc = get["src"]

    def run(outs):
        x = _full(gsrc(outs)).reshape(G * rows, lines * cols)
        return nx.silu(x).astype(np.int32).reshape(G, rows * lines, cols)  # elementwise

    return run


def _b_store(sim, ins, delta, get, G, cols):
    gsrc = get["sram"]
    return lambda outs: _full(gsrc(outs))  # the lines it stores; written to DRAM at the commit


_BATCHED = {"LOAD": _b_load, "STORE": _b_store, "GEMM": _b_gemm, "REQUANT": _b_requant, "ADD": _b_binary, "MUL": _b_binary,
            "SILU": _b_silu}


# ------------------------------------------------------------------ detection
def fuse_order(sim: GoldenSim, order: Sequence[int], instrs: Sequence[Instr | None],
               volatile: frozenset[int] | set[int] = frozenset()) -> list[tuple[int, int, object]]:
    """Runs of the execution order to fuse: ``[(start, end, closure)]`` over positions in ``order``.

    ``instrs[pc]`` is the decoded instruction (``None`` for a faulting word, never in ``order``).  Words at
    ``volatile`` pcs (ones the runtime patches between runs) are not fused, so a patch replaces one closure.
    """
    sigs = [None if pc in volatile else _shape_sig(instrs[pc]) for pc in order]
    n = len(order)
    out = []
    i = 0
    while i < n:
        if sigs[i] is None:
            i += 1
            continue
        done = False
        cands = []  # (ops covered, period, blocks) of every period that repeats here
        for p in range(1, _MAX_PERIOD + 1):
            if i + MIN_BLOCKS * p > n or sigs[i + p] != sigs[i]:
                continue
            if any(s is None for s in sigs[i:i + p]):
                break
            g = 1
            while i + (g + 1) * p <= n and sigs[i + g * p:i + (g + 1) * p] == sigs[i:i + p]:
                g += 1
            if g < MIN_BLOCKS:
                continue
            blocks = [[instrs[order[i + j * p + k]] for k in range(p)] for j in range(g)]
            g = _affine_blocks(blocks)  # the leading blocks whose addresses step as the first two do
            if g >= MIN_BLOCKS:
                cands.append((g * p, p, blocks[:g]))
        for cover, _p, blocks in sorted(cands, key=lambda c: (-c[0], c[1])):  # the longest run first
            grp = _Group(sim, blocks)
            if grp.check():
                out.append((i, i + cover, grp.build()))
                i += cover
                done = True
                break
        if not done:
            i += 1
    return out


def _affine_blocks(blocks: list[list[Instr]]) -> int:
    """How many leading blocks have every address field at block 0's plus ``j`` times the first step."""
    b0, b1 = blocks[0], blocks[1]
    steps = [{f: b1[k].fields[f] - b0[k].fields[f] for f in _ADDR[b0[k].op]} for k in range(len(b0))]
    for j, blk in enumerate(blocks):
        for k, ins in enumerate(blk):
            if any(ins.fields[f] != b0[k].fields[f] + j * d for f, d in steps[k].items()):
                return j
    return len(blocks)
