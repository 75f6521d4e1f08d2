"""Attention blocks ordered by GQA group, so that attention runs beside the weight streams (``config.attn_beside``).

On an accelerator whose ATTN and ATTN_OUT run beside a GEMM_STREAM that runs on (docs/hardware.md), a
one-sequence program (a decode step, a prefill chunk) emits each layer's attention block -- the Q, K and V
projections, RoPE, QUANT, the KV STOREs and the attention -- one KV head (GQA group) at a time, so that the
projections stream their weights while ATTNs run.  A decode step's whole pages hold only earlier tokens, so a
group's ATTNs over them need only its Q: they run beside its own K and V streams, then the next group's Q::

    Q stream (group 0), REQUANT / ROPE / QUANT
    K stream            | group 0's ATTNs of the first pages
    REQUANT, V stream   | the next pages' ATTNs
    REQUANT, ROPE / QUANT / STOREs of group 0's K and V
    Q stream (group 1)  | the rest, the relay NOP, the tail's ATTN (its LOADs wait for the STOREs), ATTN_OUT
    REQUANT / ROPE / QUANT of group 1's Q, its K stream | group 1's first pages ...
    ...                 (the last group's attention past its K and V runs alone: the O projection needs every head)

The numerics are the same: the projections are split by output lines (a group's heads), and RoPE, QUANT (one
exponent per head) and the STOREs work per head.  Inside the block Q, K and V are laid out group by group
(:func:`group_at`), so a group's RoPE, QUANT and REQUANT are one instruction for all the chunk's rows; the STOREs
go a row at a time.  Which ATTN each REQUANT follows is fixed at compile time (the context is not known then):

- decode: a stream of ``c`` cycles gets as many of the group's pages as a whole page's LOAD takes to cover ``c``;
  K and V end before the tail (its LOADs wait for their STOREs, through a compute NOP a page after them, which
  goes on beside the next Q stream), and the next group's Q stream gets the rest, the tail's ATTN and ATTN_OUT,
  which every context has;
- prefill: the next group's K and V stream first, beside the pages' ATTNs, each ended after as many rows' ATTNs
  of a whole page as it takes (:meth:`_Interleave.row`), and its K / V RoPE, QUANT and STOREs follow at once: a
  chunk's STOREs can complete a page, so its page LOADs wait for them (no early pages).  Its Q streams beside
  the tail's ATTNs and ATTN_OUT, which every chunk has (which pages its context fills is not known).

GEMM_STREAMs push no token (else they do not run on), so the plan keeps every tensor of the block live over the
whole block (:func:`widen_live`): no LOAD writes over lines a stream reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from systolica.compiler.ir import Graph, Node
from systolica.compiler.tiling import Tile
from systolica.isa import Buf, Engine

__all__ = ["BLOCK", "grouped_blocks", "group_at", "widen_live", "emit_grouped", "page_attn_cycles", "qkv_mult_span"]

#: the nodes of one llama layer's attention block, as :func:`systolica.compiler.ir.build_graph` adds them
BLOCK = ("linear", "linear", "linear", "rope", "rope", "quant", "quant", "quant", "kv_store", "attention")


def grouped_blocks(g: Graph, cfg, rows: int, batched: bool) -> list[int]:
    """The first node of every attention block that a program of ``rows`` rows emits by group: a one-sequence
    program (a decode step or a prefill chunk) on an accelerator with ``attn_beside``, of a model with several KV
    heads, without split activations or projection biases; else none (batched steps keep the layer order)."""
    if not cfg.attn_beside or batched or g.act_split or g.config.n_kv_heads < 2:
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


def group_at(gen, grp: int, row: int, heads: int) -> int:
    """Where row ``row`` of group ``grp`` starts, in lines, in a tensor of the grouped block (Q, K, V before and after
    RoPE and QUANT): group-major, each group's rows together (``heads`` heads of ``hd`` lines a row), so one
    instruction covers a group's rows.  A decode step (one row) has the row-major layout of the layer order."""
    return (grp * gen.T + row) * heads * gen.kv.hd_lines


@dataclass
class _Stream:
    """One projection block of a group: ``start`` LOADs its mult row and emits the GEMM_STREAM (returns the mult
    slot), ``finish`` the REQUANT that takes its result out of the accumulator into the group's rows;
    ``cycles``: its weights' time, or the array's where that is longer (a prefill chunk's rows)."""

    gen: object
    aq: str
    ae: str
    w: str
    dst: str
    t: Tile
    cycles: float
    grp: int
    heads: int  # the group's heads of this projection
    proj: str = "q"  # "q", "k" or "v"
    ms: str | None = None  # its mult slot, when LOADed ahead (preload, or the block's: _block_mult)
    moff: int = 0  # its mult rows' first line in that slot

    def preload(self) -> None:
        """LOAD its mult row now, ahead of the LOADs the load engine takes before the stream starts."""
        self.ms = self.gen.mult_load(self.w, self.t)

    def start(self) -> str:
        return self.gen._stream_block(self.aq, self.w, self.gen.T, self.t, ms=self.ms)

    def finish(self, ms: str) -> None:
        g, t = self.gen, self.t
        width = self.heads * g.kv.hd_lines  # a row of the group; the block is lines t.n0 .. of the whole row
        g0 = (self.grp * self.heads) * g.kv.hd_lines
        g._requant(self.ae, self.w, g.T, g.a(self.dst) + group_at(g, self.grp, 0, self.heads), g.key(self.dst),
                   width, t.n0 - g0, t.nt, ms, self.moff)


def _streams(gen, nodes: list[Node], grp: int, kv_first: bool = False) -> list[_Stream]:
    """Group ``grp``'s Q, K and V projections (``kv_first``: K and V, then Q): its heads' output lines, in blocks
    the plan's tiling allows."""
    c, hdl, cfg = gen.g.config, gen.kv.hd_lines, gen.cfg
    projs = [("q", nodes[0], c.group), ("k", nodes[1], 1), ("v", nodes[2], 1)]
    out = []
    for proj, node, heads in (projs[1:] + projs[:1] if kv_first else projs):
        (aq, ae), (dst,) = node.inputs, node.outputs
        w = node.attrs["weight"]
        m, cap = gen.mats[w], gen.p.tilings[w].nt
        n0, n1 = grp * heads * hdl, (grp + 1) * heads * hdl
        for b in range(n0, n1, cap):
            t = Tile(b, min(cap, n1 - b), 0, m.Kl)
            wbytes = t.nt * m.Kl * cfg.cols * cfg.cols // (2 if m.wfmt else 1)
            # its weights' time, or the array's (every row through every tile: a prefill chunk's many rows)
            cycles = max(wbytes / cfg.peak_dram_bytes_per_cycle, t.nt * m.Kl * gen.T)
            out.append(_Stream(gen, aq, ae, w, dst, t, cycles, grp, heads, proj))
    return out


def kv_key(layer: int, grp: int) -> str:
    """The hazard key of KV head ``grp``'s part of layer ``layer``'s cache: a group's STOREs write it, its LOADs
    read it, so they wait for no other head's STOREs (the heads' tiles do not overlap)."""
    return f"dram:kv{layer}:g{grp}"


def _rope_quant(gen, nodes: list[Node], grp: int, which: str) -> None:
    """Group ``grp``'s RoPE and QUANT of K and V (``which`` "kv") or of Q ("q"), one instruction each for the
    group's rows."""
    _, _, _, rq, rk, nq, nk, nv, _, _ = nodes
    hdl, G, T = gen.kv.hd_lines, gen.g.config.group, gen.T
    for node, heads in (((rk, 1), (nk, 1), (nv, 1)) if which == "kv" else ((rq, G), (nq, G))):
        (src,), outs = node.inputs, node.outputs
        at = group_at(gen, grp, 0, heads)
        if node.op == "rope":
            gen.s.emit("ROPE", dst=gen.a(outs[0]) + at, src=gen.a(src) + at, table=gen.a("rope", "vbuf"), rows=T,
                       heads=heads, hd=hdl, reads=[gen.key(src), "vbuf:rope"], writes=[gen.key(outs[0])],
                       patches=gen.n_rows("rows"))
        else:
            dq, de = outs
            gen.s.emit("QUANT", dst=gen.a(dq) + at, src=gen.a(src) + at, exps=gen.a(de) + grp * T * heads,
                       rows=T * heads, lines=hdl, reads=[gen.key(src)], writes=[gen.key(dq), gen.key(de)],
                       patches=gen.n_rows("rows", heads))


def _post_kv(gen, nodes: list[Node], grp: int) -> None:
    """Group ``grp``'s RoPE and QUANT of K and V and its KV STOREs, a row at a time (each row has its own place in
    the cache), one head each (as kv_store's)."""
    _rope_quant(gen, nodes, grp, "kv")
    kv, cols, T, hdl = gen.kv, gen.cols, gen.T, gen.kv.hd_lines
    kvs = nodes[8]
    kq, ke, vq, ve = kvs.inputs
    P, layer = kv.page, kvs.attrs["layer"]
    for r in range(T):
        for t, lines, part, slot in ((kq, hdl, 0, hdl * cols), (vq, hdl, P * hdl * cols, hdl * cols),
                                     (ke, 1, 2 * P * hdl * cols, cols), (ve, 1, (2 * P * hdl + P) * cols, cols)):
            gen.s.emit("STORE", buf=Buf.SPAD, sram=gen.a(t) + (grp * T + r) * lines, dram=kv.base, rows=1,
                       lines=lines, stride=kv.tile_bytes, reads=[gen.key(t)], writes=[kv_key(layer, grp)],
                       patches=[("dram", "kv_store", [layer, r, grp * kv.tile_bytes + part, slot]),
                                *gen.row_on("rows", r, 1)])


def qkv_mult_span(mats: list, cols: int) -> tuple[int, dict[str, int]] | None:
    """Where one LOAD finds a block's Q, K and V mult rows (``mats``: their matrices, in that order): the lines
    from Q's first row to V's last (a line is ``cols`` int32 multipliers) and each one's first line in them, or
    None where they are not in that order at whole lines of each other in the image."""
    line, base = cols * 4, mats[0].mult_off
    off, end = {}, 0
    for proj, m in zip("qkv", mats, strict=True):
        d = m.mult_off - base
        if d % line or d // line < end:  # between lines, or over the rows before
            return None
        off[proj], end = d // line, d // line + m.Nl
    return end, off


def _block_mult(gen, nodes: list[Node], groups: list[list[_Stream]]) -> None:
    """One LOAD of the block's Q, K and V mult rows into the plan's ``mqkv`` slot (:func:`qkv_mult_span`), each
    stream's REQUANT reading its rows there: the in-order load engine then takes one LOAD before the block instead
    of one a stream between the KV pages' (on kv260 those nine LOADs held the pages back ~250 cycles a layer).
    Where the plan has no slot, the streams LOAD their own rows as before."""
    span = qkv_mult_span([gen.mats[n.attrs["weight"]] for n in nodes[:3]], gen.cols)
    if "vbuf:mqkv" not in gen.p.addr or span is None:
        return
    lines, off = span
    gen.s.emit("LOAD", buf=Buf.VBUF, sram=gen.a("mqkv", "vbuf"), dram=gen.mats[nodes[0].attrs["weight"]].mult_off,
               rows=1, lines=lines, stride=0, writes=["vbuf:mqkv"])
    for st in (st for sts in groups for st in sts):
        st.ms, st.moff = "mqkv", off[st.proj] + st.t.n0


def emit_grouped(gen, nodes: list[Node]) -> None:
    """Emit one attention block (the nodes of :data:`BLOCK`) by group, interleaved as the module docstring says."""
    att = nodes[-1]
    layer, heads, pages = att.attrs["layer"], gen.kv.heads, gen.max_pages
    # a whole page's LOAD, what ATTN waits for: one scratchpad line a cycle at most, gmem0's beats or all ports'
    cfg = gen.cfg
    page_cycles = gen.kv.tile_bytes / min(cfg.cols, cfg.dma_bytes * cfg.load_ports)
    if gen.T == 1:
        _emit_decode(gen, nodes, layer, heads, pages, page_cycles)
        return
    (qq, qe), (o,) = att.inputs, att.outputs
    groups = [_streams(gen, nodes, grp, kv_first=True) for grp in range(heads)]
    _block_mult(gen, nodes, groups)
    kv_posted = False
    for st in groups[0]:
        if st.proj == "q" and not kv_posted:  # group 0's STOREs beside its Q stream (its pages wait for them)
            _post_kv(gen, nodes, 0)
            kv_posted = True
        st.finish(st.start())
    _rope_quant(gen, nodes, 0, "q")
    for grp in range(heads):
        todo = groups[grp + 1] if grp + 1 < heads else []
        # the next group's K / V STOREs as soon as their streams end (its page LOADs wait for them)
        post_kv = (lambda g=grp + 1: _post_kv(gen, nodes, g)) if todo else None
        hook = _Interleave(gen, layer, grp, todo, pages, page_cycles, prefill=True, post_kv=post_kv)
        gen.attn_group(qq, qe, o, layer, grp, [], whole=False, tail_at=-1, group_major=True, hook=hook,
                       row_hook=hook.row, kv_key=kv_key(layer, grp))
        if todo:
            if hook.post_kv is not None:  # the hook had no place for it: the streams ran back to back
                hook.post_kv()
            _rope_quant(gen, nodes, grp + 1, "q")


def _emit_decode(gen, nodes: list[Node], layer: int, heads: int, pages: int, page_cycles: float) -> None:
    """A decode step's attention block: group g's pages hold only earlier tokens, so its ATTNs over them need
    only its Q, and run beside its own K and V streams and then group g + 1's Q stream; its K / V RoPE, QUANT
    and STOREs follow the V stream's REQUANT, and only the tail's LOADs wait for them."""
    att = nodes[-1]
    (qq, qe), (o,) = att.inputs, att.outputs
    groups = [_streams(gen, nodes, grp) for grp in range(heads)]
    _block_mult(gen, nodes, groups)
    qs = [[st for st in sts if st.proj == "q"] for sts in groups]
    kvs = [[st for st in sts if st.proj != "q"] for sts in groups]
    last_stream = None
    for st in qs[0]:
        ms = st.start()
        last_stream = len(gen.s.instrs) - 1
        st.finish(ms)
    # group 0's first pages LOADed now, while its Q rows are roped and quantized (as _Gen.kv_store); through gmem0
    # alone they wait for the last stream (they would take its port 0), striped they go beside the streams.  Its K
    # stream's mult row first: the in-order load engine would hold K's REQUANT behind the pages (V's goes after
    # them: its slot is Q's, free only after Q's REQUANT)
    if kvs[0][0].ms is None:
        kvs[0][0].preload()
    early = gen.early_pages(layer, None if gen.cfg.load_ports > 1 else last_stream)
    _rope_quant(gen, nodes, 0, "q")
    for grp in range(heads):
        todo = kvs[grp] + (qs[grp + 1] if grp + 1 < heads else [])
        hook = _Interleave(gen, layer, grp, todo, pages, page_cycles,
                           post_kv=lambda g=grp: _post_kv(gen, nodes, g), own_kv=True)
        gen.attn_group(qq, qe, o, layer, grp, early if grp == 0 else [], whole=True, tail_at=-1, group_major=True,
                       hook=hook, kv_key=kv_key(layer, grp))
        if grp + 1 < heads:
            _rope_quant(gen, nodes, grp + 1, "q")


#: cycles the compiler adds to the performance model's fixed cycles of an ATTN job and of a query row (a margin:
#: a page's ATTN that runs a little long should not end a stream's page span early)
ATTN_JOB_MARGIN = ATTN_ROW_MARGIN = 4
#: the performance model's fixed cycles of an ATTN job and of a query row (systolica.sim.perf_costs.PerfParams
#: attn_latency / attn_row_latency; the compiler may not import sim: tests/compiler/test_gqa_groups.py checks them)
ATTN_JOB_CYCLES, ATTN_ROW_CYCLES = 54, 2


def page_attn_cycles(cfg, page: int, hd_lines: int, group: int) -> int:
    """Cycles of one ATTN of a GQA group of ``group`` query rows over a whole page of ``page`` tokens and heads of
    ``hd_lines`` lines: the performance model's ATTN cost (systolica.sim.perf_costs: K and V a line a cycle a
    job, the job's fixed cycles; per row its header, query and state lines, ``line_beats`` cycles each on the
    state-line lanes; rows sharing the p.V lanes take turns on V) with :data:`ATTN_JOB_MARGIN` a job and
    :data:`ATTN_ROW_MARGIN` a row."""
    R = cfg.attn_rows
    jobs = [min(R, group - j) for j in range(0, group, R)]
    cyc = len(jobs) * (2 * page * hd_lines + ATTN_JOB_CYCLES + ATTN_JOB_MARGIN)
    cyc += group * (hd_lines + hd_lines * cfg.line_beats + ATTN_ROW_CYCLES + ATTN_ROW_MARGIN)
    if cfg.attn_pv_shared and R > 1:  # a job's V line waits for its rows' turns on the p.V lanes
        cyc += sum((-(-n // cfg.attn_pv_sets) - 1) * (page * hd_lines + 1) + 2 for n in jobs)
    return cyc + 5  # the start, the read's register, the beat's register, the beat FIFO's and the output register


class _Interleave:
    """The hook of one group's :meth:`~systolica.compiler.codegen._Gen.attn_group`: starts the streams ``todo``
    (a prefill chunk: the next group's; ``own_kv``, a decode step: the group's own K and V, then the next group's
    Q) and finishes them (REQUANT) between its ATTNs, and places the tail's LOADs.

    Positions (``hook(pos)``): pages ``0 .. P - 1``, the tail's ATTN ``P``, ATTN_OUT ``P + 1``, after it ``P + 2``.
    A stream of ``c`` cycles started at ``pos`` finishes before ``pos + ceil(c / page_cycles)`` (``own_kv``: ``pos +
    round(c / page_time)``, a page's LOAD or ATTN, whichever is longer), at the latest before the tail's ATTN; the
    last one after ATTN_OUT.  The tail's LOADs wait for the group's STOREs through a
    compute NOP, which a running stream would hold (and the ATTNs behind it): they go right after the first
    stream's REQUANT (before the tail's ATTN), or before page 0's ATTN when no stream follows.  ``prefill``: the
    Q streams (after K and V) start no earlier than the tail's ATTNs, which every chunk has, and ``post_kv`` (the
    next group's K / V RoPE, QUANT and STOREs) goes right after the K and V streams' REQUANTs.  ``own_kv``:
    ``post_kv`` is the group's own, so K and V end before the tail's ATTN, and the relay goes a page after the
    STOREs (a NOP goes on beside a running stream), where they have written, so it holds nothing up."""

    def __init__(self, gen, layer: int, grp: int, todo: list, pages: int, page_cycles: float, *,
                 prefill: bool = False, post_kv=None, own_kv: bool = False):
        self.gen, self.layer, self.grp, self.todo = gen, layer, grp, list(todo)
        self.pages, self.page_cycles, self.prefill, self.post_kv = pages, page_cycles, prefill, post_kv
        self.own_kv = own_kv  # decode: the streams are the group's own K and V, then the next group's Q
        self.relay_at = pages  # own_kv: where the relay goes (a page after the STOREs, so that it finds them done)
        self.running = None  # (stream, mult slot, position it finishes before)
        self.relayed = False
        self.rows = 0  # prefill: rows' ATTNs of whole pages issued beside the running stream
        kv, cfg, G = gen.kv, gen.cfg, gen.g.config.group
        # one chunk row's ATTN over a whole page: its group's query rows (a decode step has one chunk row)
        self.row_cycles = page_attn_cycles(cfg, kv.page, kv.hd_lines, G)
        # decode: a whole page's time, its LOAD's or its ATTN's
        self.page_time = max(page_cycles, self.row_cycles)

    def _relay(self) -> None:
        """A compute NOP that waits for the group's KV STOREs (it reads what they write), so that the tail's LOADs
        need only a compute token: emitted early, so that the in-order load engine does not wait behind the tail
        for the STOREs, and (but with ``own_kv``) where no stream runs: a NOP goes on beside a running stream, but
        while it waits in POP it holds the ATTNs behind it."""
        if not self.relayed:
            self.gen.s.emit("NOP", engine=Engine.COMPUTE, reads=[kv_key(self.layer, self.grp)])
            self.relayed = True

    def _finish_running(self) -> None:
        """The running stream's REQUANT (it takes the result out of the accumulator once the stream has ended)."""
        st, ms, _ = self.running
        st.finish(ms)
        self.running = None

    def _kv_done(self, pos: int) -> None:
        if self.post_kv is not None and not any(st.proj != "q" for st in self.todo):
            self.post_kv()
            self.post_kv = None
            self.relay_at = min(self.relay_at, pos + 1)

    def __call__(self, pos: int) -> None:
        end = self.pages + 2
        if self.running and self.running[2] <= pos:
            self._finish_running()
            if not self.own_kv:
                self._relay()
            self._kv_done(pos)
        if self.own_kv and pos == self.pages and self.post_kv is not None:
            # the tail's ATTN is next and needs the group's STOREs: its K and V streams end here, back to back
            if self.running:
                self._finish_running()
            for st in [st for st in self.todo if st.proj != "q"]:
                self.todo.remove(st)
                st.finish(st.start())
            self._kv_done(pos)
        if self.own_kv and self.post_kv is None and pos >= self.relay_at:
            self._relay()  # a NOP goes on beside a running stream (hw/compute_engine.py)
        if pos == 0 and not self.todo:  # no stream to wait for
            self._relay()
        if pos == self.pages:  # the tail's ATTN is next: its LOADs, behind the pages' in the load engine
            self._relay()
            self.gen._tail_loads(self.layer, [], "", self.grp, f"kvt{self.layer}", self.gen.tail_parts(),
                                 key=kv_key(self.layer, self.grp))
        if not self.todo or self.running is not None:
            return
        if pos == end:  # more streams than positions: the rest back to back
            for st in self.todo:
                st.finish(st.start())
            self.todo = []
            self._kv_done(pos)
            return
        if self.prefill and self.todo[0].proj == "q" and pos < self.pages:
            return  # Q beside the tail's ATTNs (and ATTN_OUT), which every chunk has
        self._start(pos)

    def _start(self, pos: int) -> None:
        end = self.pages + 2
        st = self.todo.pop(0)
        if not self.todo and not (self.own_kv and st.proj != "q"):
            until = end
        elif pos >= self.pages:
            until = pos + 1
        elif self.prefill:  # K and V: finished by row() once enough rows ran beside, by the tail at the latest
            until = self.pages
        else:
            span = max(1, round(st.cycles / self.page_time)) if self.own_kv else ceil(st.cycles / self.page_cycles)
            until = max(pos + 1, min(self.pages, pos + span))
        self.running = (st, st.start(), until)
        self.rows = 0

    def row(self, pos: int, i: int) -> None:
        """Before row ``i``'s ATTN on page ``pos`` (prefill): a K or V stream that as many rows' ATTNs of a whole
        page cover ends here (its REQUANT), and the next K or V stream starts."""
        if self.running and self.running[0].proj != "q" and self.rows * self.row_cycles >= self.running[0].cycles:
            self._finish_running()
            self._relay()
            self._kv_done(pos)
            if self.todo and self.todo[0].proj != "q":
                self._start(pos)
        self.rows += 1
