"""Decode ordered by GQA group, so that attention runs beside the weight streams (``config.attn_beside``).

On an accelerator whose ATTN and ATTN_OUT run beside a GEMM_STREAM that runs on (docs/hardware.md), a
one-sequence decode step emits each layer's attention block -- the Q, K and V projections, RoPE, QUANT, the KV
STOREs and the attention -- one KV head (GQA group) at a time, and the projections of group ``g + 1`` stream
their weights while group ``g``'s ATTNs run::

    Q K V streams (group 0), their REQUANT / ROPE / QUANT / STOREs
    Q stream (group 1)  | group 0's ATTNs of the first pages
    REQUANT, K stream   | the next pages' ATTNs
    REQUANT, V stream   | the rest, the tail's ATTN, ATTN_OUT
    REQUANT, ROPE / QUANT / STOREs of group 1
    ...                 (the last group's attention runs alone: the O projection needs every head)

The numerics are the same: the projections are split by output lines (a group's heads), and RoPE, QUANT (one
exponent per head) and the STOREs work per head.  Which ATTN each REQUANT follows is fixed at compile time
(the context is not known then): a stream of ``c`` cycles gets as many of the group's first pages as a whole
page's LOAD takes to cover ``c``, and the group's last stream also the tail's ATTN and ATTN_OUT, which every
context has.  GEMM_STREAMs push no token (else they do not run on), so the plan keeps every tensor of the block
live over the whole block (:func:`widen_live`): no LOAD writes over lines a stream reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from systolica.compiler.ir import Graph, Node
from systolica.compiler.tiling import Tile
from systolica.isa import Buf, Engine

__all__ = ["BLOCK", "grouped_blocks", "widen_live", "emit_grouped"]

#: the nodes of one llama layer's attention block, as :func:`systolica.compiler.ir.build_graph` adds them
BLOCK = ("linear", "linear", "linear", "rope", "rope", "quant", "quant", "quant", "kv_store", "attention")


def grouped_blocks(g: Graph, cfg, rows: int, batched: bool) -> list[int]:
    """The first node of every attention block that a program of ``rows`` rows emits by group: a one-sequence
    decode step (one row) on an accelerator with ``attn_beside``, of a model with several KV heads, without
    split activations or projection biases; else none."""
    if not cfg.attn_beside or rows != 1 or batched or g.act_split or g.config.n_kv_heads < 2:
        return []
    out = []
    for i in range(len(g.nodes) - len(BLOCK) + 1):
        ns = g.nodes[i:i + len(BLOCK)]
        if tuple(n.op for n in ns) == BLOCK and not any(n.attrs.get("bias") for n in ns[:3]):
            out.append(i)
    return out


def widen_live(g: Graph, live: dict[str, tuple[int, int]], starts: list[int]) -> dict[str, tuple[int, int]]:
    """``live`` with every tensor a grouped block touches live over the whole block (its groups interleave)."""
    live = dict(live)
    for s in starts:
        e = s + len(BLOCK) - 1
        for n in g.nodes[s:e + 1]:
            for t in (*n.inputs, *n.outputs):
                lo, hi = live[t]
                live[t] = (min(lo, s), max(hi, e))
    return live


@dataclass
class _Stream:
    """One projection block of a group: ``start`` LOADs its mult row and emits the GEMM_STREAM (returns the mult
    slot), ``finish`` the REQUANT that takes its result out of the accumulator; ``cycles``: its weights' time."""

    gen: object
    aq: str
    ae: str
    w: str
    dst: str
    t: Tile
    cycles: float

    def start(self) -> str:
        return self.gen._stream_block(self.aq, self.w, 1, self.t)

    def finish(self, ms: str) -> None:
        g, t = self.gen, self.t
        g._requant(self.ae, self.w, 1, g.a(self.dst), g.key(self.dst), g.lines(self.dst), t.n0, t.nt, ms)


def _streams(gen, nodes: list[Node], grp: int) -> list[_Stream]:
    """Group ``grp``'s Q, K and V projections: its heads' output lines, in blocks the plan's tiling allows."""
    c, hdl, cfg = gen.g.config, gen.kv.hd_lines, gen.cfg
    out = []
    for node, heads, h0 in ((nodes[0], c.group, grp * c.group), (nodes[1], 1, grp), (nodes[2], 1, grp)):
        (aq, ae), (dst,) = node.inputs, node.outputs
        w = node.attrs["weight"]
        m, cap = gen.mats[w], gen.p.tilings[w].nt
        n1 = (h0 + heads) * hdl
        for n0 in range(h0 * hdl, n1, cap):
            t = Tile(n0, min(cap, n1 - n0), 0, m.Kl)
            wbytes = t.nt * m.Kl * cfg.cols * cfg.cols // (2 if m.wfmt else 1)
            out.append(_Stream(gen, aq, ae, w, dst, t, wbytes / cfg.peak_dram_bytes_per_cycle))
    return out


def _post(gen, nodes: list[Node], grp: int) -> None:
    """Group ``grp``'s RoPE and QUANT (K and V first, so their STOREs start early) and its KV STOREs."""
    _, _, _, rq, rk, nq, nk, nv, kvs, _ = nodes
    c, kv, cols = gen.g.config, gen.kv, gen.cols
    hdl, G = kv.hd_lines, c.group
    for node, heads, h0 in ((rk, 1, grp), (nk, 1, grp), (nv, 1, grp), (rq, G, grp * G), (nq, G, grp * G)):
        (src,), outs = node.inputs, node.outputs
        if node.op == "rope":
            gen.s.emit("ROPE", dst=gen.a(outs[0]) + h0 * hdl, src=gen.a(src) + h0 * hdl,
                       table=gen.a("rope", "vbuf"), rows=1, heads=heads, hd=hdl,
                       reads=[gen.key(src), "vbuf:rope"], writes=[gen.key(outs[0])])
        else:
            dq, de = outs
            gen.s.emit("QUANT", dst=gen.a(dq) + h0 * hdl, src=gen.a(src) + h0 * hdl, exps=gen.a(de) + h0,
                       rows=heads, lines=hdl, reads=[gen.key(src)], writes=[gen.key(dq), gen.key(de)])
        if node is nv:  # the STOREs of head grp: as kv_store's, one head
            kq, ke, vq, ve = kvs.inputs
            P, layer = kv.page, kvs.attrs["layer"]
            for t, lines, part, slot in ((kq, hdl, 0, hdl * cols), (vq, hdl, P * hdl * cols, hdl * cols),
                                         (ke, 1, 2 * P * hdl * cols, cols), (ve, 1, (2 * P * hdl + P) * cols, cols)):
                gen.s.emit("STORE", buf=Buf.SPAD, sram=gen.a(t) + grp * lines, dram=kv.base, rows=1, lines=lines,
                           stride=kv.tile_bytes, reads=[gen.key(t)], writes=[f"dram:kv{layer}"],
                           patches=[("dram", "kv_store", [layer, 0, grp * kv.tile_bytes + part, slot])])


def emit_grouped(gen, nodes: list[Node]) -> None:
    """Emit one attention block (the nodes of :data:`BLOCK`) by group, interleaved as the module docstring says."""
    att = nodes[-1]
    (qq, qe), (o,) = att.inputs, att.outputs
    layer, heads, pages = att.attrs["layer"], gen.kv.heads, gen.max_pages
    # a whole page's LOAD, what ATTN waits for: one scratchpad line a cycle at most, gmem0's beats or all ports'
    cfg = gen.cfg
    page_cycles = gen.kv.tile_bytes / min(cfg.cols, cfg.dma_bytes * cfg.load_ports)
    last_stream = None
    for st in _streams(gen, nodes, 0):
        ms = st.start()
        last_stream = len(gen.s.instrs) - 1
        st.finish(ms)
    # group 0's first pages LOADed now, while its K and V rows are quantized and stored (as _Gen.kv_store); through
    # gmem0 alone they wait for the last stream (they would take its port 0), striped they go beside the streams
    early = gen.early_pages(layer, None if cfg.load_ports > 1 else last_stream)
    _post(gen, nodes, 0)
    for grp in range(heads):
        todo = _streams(gen, nodes, grp + 1) if grp + 1 < heads else []
        gen.attn_group(qq, qe, o, layer, grp, early if grp == 0 else [], whole=True, tail_at=-1,
                       hook=_Interleave(gen, layer, grp, todo, pages, page_cycles))
        if grp + 1 < heads:
            _post(gen, nodes, grp + 1)


class _Interleave:
    """The hook of one group's :meth:`~systolica.compiler.codegen._Gen.attn_group`: starts the next group's
    streams and finishes them (REQUANT) between its ATTNs, and places the tail's LOADs.

    Positions (``hook(pos)``): pages ``0 .. P - 1``, the tail's ATTN ``P``, ATTN_OUT ``P + 1``, after it ``P + 2``.
    A stream of ``c`` cycles started at ``pos`` finishes before ``pos + ceil(c / page_cycles)``, at the latest
    before the tail's ATTN; the last one after ATTN_OUT.  The tail's LOADs wait for the group's STOREs through a
    compute NOP, which a running stream would hold (and the ATTNs behind it): they go right after the first
    stream's REQUANT (before the tail's ATTN), or before page 0's ATTN when no stream follows."""

    def __init__(self, gen, layer: int, grp: int, todo: list, pages: int, page_cycles: float):
        self.gen, self.layer, self.grp, self.todo = gen, layer, grp, list(todo)
        self.pages, self.page_cycles = pages, page_cycles
        self.running = None  # (finish, mult slot, position it finishes before)
        self.relayed = False

    def _relay(self) -> None:
        """A compute NOP that waits for the group's KV STOREs (it reads what they write), so that the tail's LOADs
        need only a compute token: emitted where no stream runs (a running stream holds every compute instruction
        but ATTN), and early, so that the in-order load engine does not wait behind the tail for the STOREs."""
        if not self.relayed:
            self.gen.s.emit("NOP", engine=Engine.COMPUTE, reads=[f"dram:kv{self.layer}"])
            self.relayed = True

    def __call__(self, pos: int) -> None:
        end = self.pages + 2
        if self.running and self.running[2] <= pos:
            finish, ms, _ = self.running
            finish(ms)
            self.running = None
            self._relay()
        if pos == 0 and not self.todo:  # no stream to wait for
            self._relay()
        if pos == self.pages:  # the tail's ATTN is next: its LOADs, behind the pages' in the load engine
            self._relay()
            self.gen._tail_loads(self.layer, [], "", self.grp, f"kvt{self.layer}", self.gen.tail_parts())
        if not self.todo:
            return
        if pos == end:  # more streams than positions: the rest back to back
            for st in self.todo:
                st.finish(st.start())
            self.todo = []
            return
        if self.running is None:
            st = self.todo.pop(0)
            until = end if not self.todo else max(pos + 1, min(self.pages, pos + ceil(st.cycles / self.page_cycles)))
            self.running = (st.finish, st.start(), until)
