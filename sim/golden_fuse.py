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
MIN_BLOCKS = 3  # fewer repeats are not worth a fused closure
_MAX_PERIOD = 16
_BUFS = {Buf.SPAD: "spad", Buf.ACC: "acc", Buf.VBUF: "vbuf"}
# per fusable op: the address fields (may move by a constant per block); every other field must be equal
_ADDR = {"LOAD": ("sram", "dram"), "GEMM": ("dst", "a", "w"), "REQUANT": ("dst", "src", "mult", "exps"),
         "ADD": ("dst", "a", "b"), "MUL": ("dst", "a", "b"), "SILU": ("dst", "src")}


def _shape_sig(ins: Instr):
    addr = _ADDR.get(ins.op)
    if addr is None or (ins.op == "GEMM" and (ins.acc or ins.k == 0 or not ins.m or not ins.n)):
        return None
    if ins.op == "LOAD" and not (ins.rows and ins.lines):
        return None
    return (ins.op, *sorted((k, v) for k, v in ins.fields.items() if k not in addr))


def _regions(sim: GoldenSim, ins: Instr, f: dict) -> tuple[list[tuple], tuple]:
    """Reads ``[(name, buf, start, lines)]`` and the write ``(buf, start, lines)`` of a fusable op."""
    cols = sim.cfg.cols
    op = ins.op
    if op == "LOAD":
        return [], (_BUFS[Buf(ins.buf)], f["sram"], ins.rows * ins.lines)
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
            wd = self.delta[k]["sram" if ins.op == "LOAD" else "dst"]
            if ins.op == "LOAD" and self.delta[k]["dram"] < 0:
                return False
            if wd < 0 or ws + (G - 1) * wd + wn > written[wb].size:
                return False
            self.writes.append((wb, ws, wn, wd))
            for j in range(G):
                written[wb][ws + j * wd:ws + j * wd + wn] = True
        for k in range(P):
            ins = blocks[0][k]
            reads, _ = _regions(sim, ins, ins.fields)
            resolved = []
            for name, buf, s, n in reads:
                d = self.delta[k][name]
                src = None
                for kw in range(k - 1, -1, -1):  # the latest writer before k in the block
                    wb, ws, wn, wd = self.writes[kw]
                    if wb != buf or not _overlap(s, n, ws, wn):
                        continue
                    if not (ws <= s and s + n <= ws + wn) or wd != d:
                        return False
                    src = ("own", kw, s - ws, n)
                    break
                if src is None:
                    if d < 0 or s + (G - 1) * d + n > written[buf].size:
                        return False
                    for j in range(G):
                        if written[buf][s + j * d:s + j * d + n].any():
                            return False  # written by another block or later in the block
                    src = ("ext", buf, s, n, d)
                else:  # nothing between the writer and k (in the block) touches those lines
                    for k2 in range(src[1] + 1, k):
                        wb, ws, wn, _ = self.writes[k2]
                        if wb == buf and _overlap(s, n, ws, wn):
                            return False
                resolved.append((name, src))
            self.reads.append(resolved)
        return True

    # -------------------------------------------------------------- closure
    def build(self) -> Callable[[], None]:
        sim, G, P = self.sim, self.G, self.P
        cols = sim.cfg.cols
        steps = []
        for k in range(P):
            ins = self.blocks[0][k]
            getters = {name: self._getter(src) for name, src in self.reads[k]}
            steps.append(_BATCHED[ins.op](sim, ins, self.delta[k], getters, G, cols))
        # commits in sequential (block, op) order; an op whose lines do not move keeps only the last block's
        commits = []
        for j in range(G):
            for k in range(P):
                wb, ws, wn, wd = self.writes[k]
                if wd == 0 and j != G - 1:
                    continue
                dst = getattr(sim, wb)[ws + j * wd:ws + j * wd + wn]
                commits.append((dst, k, j))
        outs: list = [None] * P

        def run() -> None:
            for k, step in enumerate(steps):
                outs[k] = step(outs)
            for dst, k, j in commits:
                np.copyto(dst, outs[k][j], casting="unsafe")

        return run

    def _getter(self, src) -> Callable[[list], np.ndarray]:
        """A function of the outputs so far giving the operand as ``(G, lines, cols)``."""
        if src[0] == "own":
            _, kw, off, n = src
            return lambda outs: outs[kw][:, off:off + n]
        _, buf, s, n, d = src
        arr = getattr(self.sim, buf)
        view = np.lib.stride_tricks.as_strided(arr[s:], shape=(self.G, n, arr.shape[1]),
                                               strides=(d * arr.strides[0], arr.strides[0], arr.strides[1]),
                                               writeable=False)
        return lambda outs: view


# ------------------------------------------------------------------ batched ops
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


def _b_gemm(sim, ins, delta, get, G, cols):
    m, k, n = ins.m, ins.k, ins.n
    kk, nn = k * cols, n * cols
    if kk * (1 << 14) > 1 << 53:
        return None
    ft = np.float32 if kk * (1 << 14) <= 1 << 24 else np.float64
    ga, gw = get["a"], get["w"]
    chunk = max(1, (1 << 18) // max(nn * kk, 1))  # weight tiles converted at a time: ~1 MB of floats
    wf = np.empty((chunk * nn, kk), ft)
    af = np.empty((m, kk), ft)
    res = np.empty((m, G * nn), ft)
    abatch = np.empty((G, m, kk), ft)

    def run(outs):
        a, w = ga(outs), gw(outs)  # (G, m*k, cols), (G, nn*k, cols)
        shared = a.strides[0] == 0
        if shared:
            np.copyto(af, a[0].reshape(m, kk))
        else:
            np.copyto(abatch, a.reshape(G, m, kk))
        for c in range(0, G, chunk):
            g = min(chunk, G - c)
            wc = wf[:g * nn]
            np.copyto(wc, w[c:c + g].reshape(g * nn, kk))
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
        src = gs(outs).reshape(G, rows, L)
        mult = gm(outs).reshape(G, 1, L)
        e = ge(outs)[:, :, 0].astype(_I64)  # (G, rows)
        s = (shift - e)[:, :, None]
        if s.min() >= 1 and s.max() <= 63:
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
        a = ga(outs).reshape(G, rows, L).astype(_I64)
        b = gb(outs).reshape(G, 1 if bcast else rows, L)
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
        x = gsrc(outs).reshape(G * rows, lines * cols)
        return nx.silu(x).astype(np.int32).reshape(G, rows * lines, cols)  # elementwise

    return run


_BATCHED = {"LOAD": _b_load, "GEMM": _b_gemm, "REQUANT": _b_requant, "ADD": _b_binary, "MUL": _b_binary,
            "SILU": _b_silu}


# ------------------------------------------------------------------ detection
def fuse_order(sim: GoldenSim, order: Sequence[int], instrs: Sequence[Instr | None]) -> list[tuple[int, int, object]]:
    """Runs of the execution order to fuse: ``[(start, end, closure)]`` over positions in ``order``.

    ``instrs[pc]`` is the decoded instruction (``None`` for a faulting word, never in ``order``).
    """
    sigs = [_shape_sig(instrs[pc]) for pc in order]
    n = len(order)
    out = []
    i = 0
    while i < n:
        if sigs[i] is None:
            i += 1
            continue
        done = False
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
                grp = _Group(sim, blocks[:g])
                if grp.check():
                    out.append((i, i + g * p, grp.build()))
                    i += g * p
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
