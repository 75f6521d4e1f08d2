"""Code generation: the graph, for ``rows`` token rows, as instructions with hazards and patch points.

One function per IR op lowers it to LOAD / compute / STORE instructions on the blocks that
:func:`~systolica.compiler.plan.plan_program` allocated; :class:`~systolica.compiler.schedule.Scheduler` turns the reads and
writes into token flags.  Fields that change per step carry a patch ``(field, kind, args)``;
their compiled value is the one of the first step (position 0, token 0) and the runtime rewrites
them (:mod:`systolica.artifact`).

A program of ``T > 1`` rows runs any ``n <= T`` of them: every row count and GEMM ``m`` is patched to
``n`` (``n_rows``), the instructions of one row (its embedding load, KV stores, attention) are emptied
for the rows past ``n`` (``row_on``, ``attn_nq``: zero rows or query heads), and the logits row is row
``n - 1`` (``last_row``).  No GEMM_STREAM ever gets ``m = 0``.
"""

from __future__ import annotations

from systolica import numerics as nx
from systolica.compiler.gqa_groups import BLOCK, emit_grouped
from systolica.compiler.image import KvGeometry
from systolica.compiler.ir import Graph, Node
from systolica.compiler.plan import ProgramPlan
from systolica.compiler.schedule import Scheduler
from systolica.compiler.tiling import Tile
from systolica.isa import Buf
from systolica.layout import attn_state_lines, kv_tile, lines_for

__all__ = ["generate"]


class _Gen:
    def __init__(self, g: Graph, qm, cfg, plan: ProgramPlan, mats, kv: KvGeometry, regions, rows_bytes, max_pages,
                 batched: bool = False):
        self.g, self.qm, self.cfg, self.p, self.mats, self.kv = g, qm, cfg, plan, mats, kv
        self.batched = batched  # one sequence per row: own positions (rope rows, pos rows) and own KV pages
        self.reg, self.rb, self.max_pages = regions, rows_bytes, max_pages
        self.T, self.cols = plan.rows, cfg.cols
        self.s = Scheduler(plan.overlaps, cfg.queue_depth)
        self.mslot = 0
        self.kvslot = 0
        # one-sequence decode: a layer's first whole-page LOADs go before its KV STOREs (kv_store), as the new
        # token is always in the tail (systolica.patch_kinds), never in a whole page
        self.hoist_kv = not batched and plan.rows == 1
        self.early_kv: dict[int, list[str]] = {}  # layer -> the slots of KV head 0's pages LOADed early

    def a(self, name: str, buf: str | None = None) -> int:
        if buf is None:
            t = self.g.tensors.get(name)
            buf = "spad" if t is not None and t.space == "exps" else (t.space if t is not None else "vbuf")
            name = t.buffer or name if t is not None else name
        return self.p.addr[f"{buf}:{name}"]

    def key(self, name: str) -> str:
        t = self.g.tensors.get(name)
        if t is None:
            return name
        buf = "spad" if t.space == "exps" else t.space
        return f"{buf}:{t.buffer or self.p.alias.get(name, name)}"

    @property
    def k(self) -> int:
        """GEMM / REQUANT rows per token row: 2 with split activations (int8 part, then residual)."""
        return 2 if self.g.act_split else 1

    # ------------------------------------------------------------------ row-count patches
    def n_rows(self, field: str, per_row: int = 1, base: int = 0, rows: int | None = None) -> list:
        """The patch that sets ``field`` to ``base + per_row * n`` for a run of ``n`` rows (none for one
        compiled row: a last-row-only tensor, or decode)."""
        return [(field, "n_rows", [base, per_row])] if (self.T if rows is None else rows) > 1 else []

    def row_on(self, field: str, row: int, value: int, per_row: int = 1) -> list:
        """``field`` is ``value`` for rows ``row < per_row * n`` of a run of ``n`` rows, else 0 (nothing)."""
        return [(field, "row_on", [row, value, per_row])] if self.T > 1 else []

    def _fold(self, dst: int, dst_key: str, rows: int, lines: int) -> None:
        """Split activations: add the residual half's result rows onto the int8 half's (reference order)."""
        if self.g.act_split:
            self.s.emit("ADD", dst=dst, a=dst, b=dst + rows * lines, rows=rows, lines=lines, reads=[dst_key],
                        writes=[dst_key], patches=self.n_rows("rows", rows=rows) +
                        self.n_rows("b", lines, dst, rows=rows))

    def rows_of(self, name: str) -> int:
        return 1 if self.g.tensors[name].last else self.T

    def lines(self, name: str) -> int:
        return self.g.tensors[name].lines(self.cols)

    # ------------------------------------------------------------------ ops
    def embed(self, n: Node) -> None:
        T, Dl = self.T, lines_for(self.g.config.dim, self.cols)
        x = self.a("x", "vbuf")
        emb = self.reg["token_embd"].offset
        for i in range(T):
            self.s.emit("LOAD", buf=Buf.VBUF, sram=x + i * Dl, dram=emb, rows=1, lines=Dl, stride=0,
                        writes=["vbuf:x"], patches=[("dram", "embed", [i]), *self.row_on("rows", i, 1)])
        if n.attrs["positions"]:
            self._table_rows("pos", "pos_embd", Dl)
            self.s.emit("ADD", dst=x, a=x, b=self.a("pos", "vbuf"), rows=T, lines=Dl, reads=["vbuf:x", "vbuf:pos"],
                        writes=["vbuf:x"], patches=self.n_rows("rows"))
        else:
            self._table_rows("rope", "rope", self.kv.hd_lines)

    def _table_rows(self, buf: str, table: str, lines: int) -> None:
        """The rows of a per-position table (RoPE or GPT-2 positions) for the run's rows: one LOAD of consecutive
        positions, or in a batched program one LOAD per row at its own position."""
        T, key = self.T, "pos" if table == "pos_embd" else "rope"
        dram, stride = self.reg[table].offset, self.rb[f"{key}_row"]
        if not self.batched:
            self.s.emit("LOAD", buf=Buf.VBUF, sram=self.a(buf, "vbuf"), dram=dram, rows=T, lines=lines,
                        stride=stride, writes=[f"vbuf:{buf}"], patches=[("dram", table, []), *self.n_rows("rows")])
            return
        for i in range(T):
            self.s.emit("LOAD", buf=Buf.VBUF, sram=self.a(buf, "vbuf") + i * lines, dram=dram, rows=1, lines=lines,
                        stride=0, writes=[f"vbuf:{buf}"], patches=[("dram", f"{table}_at", [i]),
                                                                   *self.row_on("rows", i, 1)])

    def norm(self, n: Node) -> None:
        (src,), (dst,) = n.inputs, n.outputs
        Dl = self.lines(src)
        gpt2 = n.attrs["kind"] == "layer"
        self.s.emit("LOAD", buf=Buf.VBUF, sram=self.a("gamma", "vbuf"), dram=self.reg["vec:" + n.attrs["weight"]].offset,
                    rows=1, lines=(2 if gpt2 else 1) * Dl, stride=0, writes=["vbuf:gamma"])
        rows = self.rows_of(dst)
        last = rows == 1 and self.T > 1  # the logits row: the run's last row, n - 1
        off = (self.T - 1) * Dl if last else 0
        patches = [("src", "last_row", [self.a(src), Dl])] if last else self.n_rows("rows", rows=rows)
        self.s.emit("LAYERNORM" if gpt2 else "RMSNORM", dst=self.a(dst), src=self.a(src) + off,
                    gamma=self.a("gamma", "vbuf"), rows=rows, n=self.g.config.dim, eps=self.qm.eps_q32,
                    reads=[self.key(src), "vbuf:gamma"], writes=[self.key(dst)], patches=patches)

    def quant(self, n: Node) -> None:
        (src,), (dq, de) = n.inputs, n.outputs
        t, te = self.g.tensors[src], self.g.tensors[de]
        rows = self.rows_of(src)
        heads = t.heads if te.per_head_exps else 1
        r, lines = rows * heads, (t.seg_lines(self.cols) if te.per_head_exps else t.lines(self.cols))
        split = {"split": 1} if n.attrs.get("split") else {}  # (a field older ISA tables lack)
        self.s.emit("QUANT", dst=self.a(dq), src=self.a(src), exps=self.a(de), rows=r, lines=lines, **split,
                    reads=[self.key(src)], writes=[self.key(dq), self.key(de)],
                    patches=self.n_rows("rows", heads, rows=rows))

    def mult_load(self, wname: str, t: Tile) -> str:
        """LOAD the mult row of output block ``t`` of ``wname`` into the next mult slot; returns the slot."""
        m, cols = self.mats[wname], self.cols
        ms = f"m{self.mslot}"
        self.mslot ^= 1
        self.s.emit("LOAD", buf=Buf.VBUF, sram=self.a(ms, "vbuf"), dram=m.mult_off + t.n0 * cols * 4, rows=1,
                    lines=t.nt, stride=0, writes=[f"vbuf:{ms}"])
        return ms

    def _stream_block(self, aq: str, wname: str, m_rows: int, t: Tile, ms: str | None = None) -> str:
        """Load the mult row of output block ``t`` (unless ``ms``, a slot :meth:`mult_load` filled already) and
        stream its weights from DRAM into ``acc`` (``m_rows`` rows of ``t.nt`` lines, all of K in one GEMM_STREAM);
        returns the mult slot.

        The weights need no token: nothing writes them, and GEMM_STREAM reads them itself on the compute engine."""
        m, acc = self.mats[wname], self.a("acc", "acc")
        if ms is None:
            ms = self.mult_load(wname, t)
        fmt = {"wfmt": m.wfmt, "gshift": m.gshift} if m.wfmt else {}  # (fields older ISA tables lack)
        self.s.emit("GEMM_STREAM", dst=acc, a=self.a(aq), w=m.w_addr(t.n0, self.cfg), m=m_rows, k=m.Kl, n=t.nt,
                    acc=0, **fmt, reads=[self.key(aq)], writes=["acc:acc"],
                    patches=self.n_rows("m", self.k, rows=m_rows // self.k))
        return ms

    def _blocks(self, wname: str) -> list[Tile]:
        return self.p.tilings[wname].tiles()

    def _matmul(self, aq: str, ae: str, wname: str, m_rows: int, sink) -> None:
        """Every output block of ``wname``; ``sink(n0, nt, mslot)`` consumes each from ``acc``."""
        for t in self._blocks(wname):
            ms = self._stream_block(aq, wname, m_rows, t)
            sink(t.n0, t.nt, ms)

    def _requant(self, ae: str, wname: str, rows: int, dst: int, dst_key: str, dst_lines: int, n0: int, nt: int,
                 ms: str, moff: int = 0) -> None:
        """REQUANT of an output block from ``acc``, its mult rows at line ``moff`` of vector-buffer slot ``ms``."""
        m, acc = self.mats[wname], self.a("acc", "acc")
        mult = self.a(ms, "vbuf") + moff
        reads = ["acc:acc", f"vbuf:{ms}", self.key(ae)]
        per = self.k  # result rows per token row
        if nt == dst_lines:
            self.s.emit("REQUANT", dst=dst, src=acc, mult=mult, exps=self.a(ae), rows=rows, lines=nt,
                        shift=m.shift, reads=reads, writes=[dst_key], patches=self.n_rows("rows", per, rows=rows // per))
            return
        for r in range(rows):
            self.s.emit("REQUANT", dst=dst + r * dst_lines + n0, src=acc + r * nt, mult=mult,
                        exps=self.a(ae) + r, rows=1, lines=nt, shift=m.shift, reads=reads, writes=[dst_key],
                        patches=self.row_on("rows", r, 1, per) if rows > per else [])

    def linear(self, n: Node) -> None:
        (aq, ae), (dst,) = n.inputs, n.outputs
        w, rows, L = n.attrs["weight"], self.rows_of(aq), self.lines(dst)
        self._matmul(aq, ae, w, self.k * rows, lambda n0, nt, ms: self._requant(ae, w, self.k * rows, self.a(dst),
                                                                                self.key(dst), L, n0, nt, ms))
        self._fold(self.a(dst), self.key(dst), rows, L)
        if n.attrs.get("bias"):
            self.s.emit("LOAD", buf=Buf.VBUF, sram=self.a("bias", "vbuf"), dram=self.mats[w].bias_off, rows=1,
                        lines=L, stride=0, writes=["vbuf:bias"])
            self.s.emit("ADD", dst=self.a(dst), a=self.a(dst), b=self.a("bias", "vbuf"), rows=rows, lines=L, bcast=1,
                        reads=[self.key(dst), "vbuf:bias"], writes=[self.key(dst)], patches=self.n_rows("rows", rows=rows))

    def logits(self, n: Node) -> None:
        """The LM head, block by block into the logits region: the last row's, or every row's (one row of
        ``logits_row_bytes`` each) in a program whose head has all rows."""
        aq, ae = n.inputs
        out, r = self.reg["logits"].offset, self.rows_of(aq)
        row_bytes = lines_for(self.g.config.vocab_size, self.cols) * self.cols * 4

        def sink(n0: int, nt: int, ms: str) -> None:
            lg = f"lg{n0 // self.p.tilings['output'].nt % 2}"
            self._requant(ae, "output", self.k * r, self.a(lg, "vbuf"), f"vbuf:{lg}", nt, 0, nt, ms)
            self._fold(self.a(lg, "vbuf"), f"vbuf:{lg}", r, nt)
            self.s.emit("STORE", buf=Buf.VBUF, sram=self.a(lg, "vbuf"), dram=out + n0 * self.cols * 4, rows=r,
                        lines=nt, stride=row_bytes if r > 1 else 0, reads=[f"vbuf:{lg}"], writes=["dram:logits"],
                        patches=self.n_rows("rows", rows=r))

        self._matmul(aq, ae, "output", self.k * r, sink)

    def glu(self, n: Node) -> None:
        """SwiGLU block by block: gate and up of one column block, SiLU, MUL into the act row.

        Only one column block of gate and up is on chip at a time (``gbuf``, ``ubuf``), so a prefill
        chunk needs one ffn-wide row per token instead of three.  Element-wise, so bit-exact.  With
        ``config.attn_beside`` a block's SiLU runs beside its up stream (emitted between the stream and the up
        REQUANT, which reads the accumulator and so waits for it), and the next block's gate stream starts before
        this block's MUL, which runs beside it (SILU and MUL touch only the vector buffer; the streams only the
        scratchpad and the accumulator).  Without it the engine runs them one after another in this order."""
        (aq, ae), (dst,) = n.inputs, n.outputs
        rows, F = self.rows_of(aq), self.lines(dst)
        g, u = self.a("gbuf", "vbuf"), self.a("ubuf", "vbuf")
        blocks = list(zip(self._blocks(n.attrs["gate"]), self._blocks(n.attrs["up"]), strict=True))
        ahead = bool(self.cfg.attn_beside)
        started = None  # the mult slot of a gate stream started ahead, for its REQUANT
        for b, (gt, ut) in enumerate(blocks):
            n0, nt = gt.n0, gt.nt
            for w, t, buf in ((n.attrs["gate"], gt, "gbuf"), (n.attrs["up"], ut, "ubuf")):
                ms = started if buf == "gbuf" and started is not None else self._stream_block(aq, w, self.k * rows, t)
                if buf == "ubuf":  # the gate block's SiLU beside the up stream (before the up REQUANT, which waits)
                    self.s.emit("SILU", dst=g, src=g, rows=rows, lines=nt, reads=["vbuf:gbuf"], writes=["vbuf:gbuf"],
                                patches=self.n_rows("rows", rows=rows))
                self._requant(ae, w, self.k * rows, self.a(buf, "vbuf"), f"vbuf:{buf}", nt, 0, nt, ms)
                self._fold(self.a(buf, "vbuf"), f"vbuf:{buf}", rows, nt)
            started = None
            if ahead and b + 1 < len(blocks):
                started = self._stream_block(aq, n.attrs["gate"], self.k * rows, blocks[b + 1][0])
            calls = [(0, rows, self.n_rows("rows", rows=rows))] if nt == F else \
                [(r, 1, self.row_on("rows", r, 1)) for r in range(rows)]
            for r, rr, patches in calls:
                self.s.emit("MUL", dst=self.a(dst) + r * F + n0, a=g + r * nt, b=u + r * nt, rows=rr, lines=nt,
                            shift=nx.FX_FRAC, reads=["vbuf:gbuf", "vbuf:ubuf"], writes=[self.key(dst)], patches=patches)

    def rope(self, n: Node) -> None:
        (src,), (dst,) = n.inputs, n.outputs
        t = self.g.tensors[src]
        self.s.emit("ROPE", dst=self.a(dst), src=self.a(src), table=self.a("rope", "vbuf"), rows=self.T, heads=t.heads,
                    hd=t.seg_lines(self.cols), reads=[self.key(src), "vbuf:rope"], writes=[self.key(dst)],
                    patches=self.n_rows("rows"))

    def kv_store(self, n: Node) -> None:
        kq, ke, vq, ve = n.inputs
        kv, cols, layer = self.kv, self.cols, n.attrs["layer"]
        if self.hoist_kv:
            # KV head 0's first pages (as many as there are slots) LOADed now, while the new K and V rows are
            # quantized and stored, instead of after the STOREs: whole pages hold only earlier tokens, so they
            # read "dram:kv<layer>:whole", not the region the STOREs write.  They wait for the last weight stream
            # (the V projection's): a LOAD shares gmem0 with weight port 0 and would slow the stream as much.
            stream = next((i for i in range(len(self.s.instrs) - 1, -1, -1) if self.s.instrs[i].op == "GEMM_STREAM"),
                          None)
            self.early_kv[layer] = self.early_pages(layer, stream)
        H, hdl, P = kv.heads, kv.hd_lines, kv.page
        parts = ((kq, hdl, 0, hdl * cols), (vq, hdl, P * hdl * cols, hdl * cols),
                 (ke, 1, 2 * P * hdl * cols, cols), (ve, 1, (2 * P * hdl + P) * cols, cols))
        for i in range(self.T):
            for src, lines, part, slot in parts:
                self.s.emit("STORE", buf=Buf.SPAD, sram=self.a(src) + i * H * lines, dram=kv.base, rows=H, lines=lines,
                            stride=kv.tile_bytes, reads=[self.key(src)], writes=[f"dram:kv{layer}"],
                            patches=[("dram", "kv_store", [layer, i, part, slot]), *self.row_on("rows", i, H)])

    def attention(self, n: Node) -> None:
        (qq, qe), (o,) = n.inputs, n.outputs
        layer = n.attrs["layer"]
        early = self.early_kv.pop(layer, [])
        for grp in range(self.kv.heads):
            # with pages LOADed early, the tail's LOADs (behind the STOREs: a NOP between) follow page 0's
            # ATTN, which then hides the STOREs' write latency; else they follow page 0's LOAD
            tail_at = 1 if early and grp == 0 and self.max_pages > 1 else 0
            self.attn_group(qq, qe, o, layer, grp, early if grp == 0 else [], whole=bool(early), tail_at=tail_at)

    def tail_parts(self) -> tuple:
        """The tail tile's three parts: (line offset in the tile, lines first, lines a token)."""
        tile, hdl = kv_tile(self.kv.page_log2, self.kv.hd_lines), self.kv.hd_lines
        return (tile.k, 0, hdl), (tile.v, 0, hdl), (tile.kexp, self.kv.page, 1)

    def attn_group(self, qq: str, qe: str, o: str, layer: int, grp: int, early: list[str], *, whole: bool,
                   tail_at: int, hook=None, row_hook=None, group_major: bool = False,
                   kv_key: str | None = None) -> None:
        """The attention of KV head ``grp``: its pages' LOADs and ATTNs, the tail's, and ATTN_OUT.

        The pages the context fills come whole, a LOAD each (`rows` 0 for any other page: kv_rows).  The page
        it ends in, if partly filled (the tail: t < P tokens), comes in a tile of its own, only its t valid
        tokens: K's and V's first t and the exponent lines up to V's t-th, three LOADs (a LOAD packs its rows
        in the scratchpad, so one cannot leave the gaps between the tile's parts, layout.kv_tile) whose `lines`
        the runtime patches (kv_tail_lines; 0 when the context ends on a page boundary).  They follow page
        ``tail_at``'s LOAD (-1: the caller emits them); the tail's ATTN comes last, after the pages past it
        (t = 0: no-ops), so the state sees the pages in order.  ``early``: the slots of the first pages, LOADed
        already; ``whole``: the page LOADs read ``dram:kv<layer>:whole`` (this step's STOREs write only its tail).
        ``hook(pos)``, if given, is called before the ATTNs of page ``pos``, before the tail's (``max_pages``),
        before ATTN_OUT (``max_pages + 1``) and after it (``max_pages + 2``); ``row_hook(j, i)`` before the ATTN of
        row ``i`` on page ``j`` (after ``hook(j)``).  ``group_major``: Q and its exponents
        are laid out group by group (compiler.gqa_groups.group_at), not row by row.  ``kv_key``: the hazard key of
        the KV region its LOADs read (default ``dram:kv<layer>``, what every KV STORE writes)."""
        c, kv = self.g.config, self.kv
        H, G, hdl = c.n_heads, c.group, kv.hd_lines
        st = self.a("state", "vbuf")
        kt = f"kvt{layer}"
        hook = hook or (lambda pos: None)
        # one sequence: each KV tile is loaded once for all rows; batched: each row reads its own pages
        loaders = [([], range(self.T))] if not self.batched else [([i], (i,)) for i in range(self.T)]
        for at, rows in loaders:
            sfx = "_at" if at else ""
            for j in range(self.max_pages):
                ks = early[j] if j < len(early) else self._page_load(layer, at, sfx, grp, j, whole=whole,
                                                                          key=kv_key)
                if j == tail_at:
                    self._tail_loads(layer, at, sfx, grp, kt, self.tail_parts(), key=kv_key)
                hook(j)
                for i in rows:
                    if row_hook is not None:
                        row_hook(j, i)
                    self._attn(qq, qe, i, grp, ks, int(j == 0), group_major, [("t", "attn_t", [i, j]),
                               ("offset", "attn_offset", [i, j]), ("nq", "attn_nq", [i, j, G])])
            hook(self.max_pages)
            for i in rows:
                self._attn(qq, qe, i, grp, kt, 0, group_major, [("t", "attn_tail_t", [i]), ("offset", "attn_tail_offset", [i]),
                                                   ("nq", "attn_tail_nq", [i, G]), ("init", "attn_tail_init", [i])])
        hook(self.max_pages + 1)
        for i in range(self.T):
            h0 = i * H + grp * G
            self.s.emit("ATTN_OUT", dst=self.a(o) + h0 * hdl, state=st + i * attn_state_lines(G, hdl), nq=G, hd=hdl,
                        reads=["vbuf:state"], writes=[self.key(o)], patches=self.row_on("nq", i, G))
        hook(self.max_pages + 2)

    def _tail_loads(self, layer: int, at: list, sfx: str, grp: int, kt: str, tail, key: str | None = None) -> None:
        """The tail's three LOADs (its valid tokens of K, of V, and the exponent lines) into slot ``kt``; ``key``:
        the KV region's hazard key (default ``dram:kv<layer>``)."""
        for off, first, per in tail:
            self.s.emit("LOAD", buf=Buf.SPAD, sram=self.a(kt, "spad") + off, dram=self.kv.base, rows=1,
                        lines=0, stride=0, reads=[key or f"dram:kv{layer}"], writes=[f"spad:{kt}"],
                        patches=[("dram", "kv_tail" + sfx, [layer, *at, grp, off * self.cols]),
                                 ("lines", "kv_tail_lines" + sfx, [*at, first, per])])

    def early_pages(self, layer: int, after: int | None) -> list[str]:
        """LOAD KV head 0's first whole pages of ``layer`` (one per slot) ahead of the step's KV STOREs (whole
        pages hold only earlier tokens); returns their slots.  ``after``: an instruction they wait for."""
        return [self._page_load(layer, [], "", 0, j, whole=True, after=after)
                for j in range(min(self.p.kv_slots, self.max_pages))]

    def _kv_slot(self) -> str:
        """The next of the KV-tile slots, in turn (LOADs fill the others while ATTN reads one)."""
        ks = f"kv{self.kvslot}"
        self.kvslot = (self.kvslot + 1) % self.p.kv_slots
        return ks

    def _page_load(self, layer: int, at: list, sfx: str, grp: int, j: int, *, whole: bool = False,
                   after: int | None = None, key: str | None = None) -> str:
        """LOAD page ``j`` of KV head ``grp`` whole (or nothing: ``kv_rows``) into the next slot; returns the slot.
        ``whole``: it reads ``dram:kv<layer>:whole`` (decode: the STOREs of the step write only its tail), else
        ``key`` (default ``dram:kv<layer>``); ``after``: an instruction it waits for (an ordering only:
        Scheduler.emit)."""
        ks, kv = self._kv_slot(), self.kv
        src = f"dram:kv{layer}:whole" if whole else key or f"dram:kv{layer}"
        self.s.emit("LOAD", buf=Buf.SPAD, sram=self.a(ks, "spad"), dram=kv.base, rows=1,
                    lines=kv_tile(kv.page_log2, kv.hd_lines).lines, stride=0, after=after,
                    reads=[src], writes=[f"spad:{ks}"],
                    patches=[("dram", "kv_page" + sfx, [layer, *at, j, grp]), ("rows", "kv_rows" + sfx, [*at, j])])
        return ks

    def _attn(self, qq: str, qe: str, row: int, grp: int, ks: str, init: int, group_major: bool,
              patches: list) -> None:
        """ATTN of ``row``'s query heads of KV head ``grp`` over the tile in slot ``ks`` (``t``, ``offset``, ``nq``
        patched); ``group_major``: Q's layout (:meth:`attn_group`)."""
        c, kv = self.g.config, self.kv
        G, hdl = c.group, kv.hd_lines
        h0 = (grp * self.T + row) * G if group_major else row * c.n_heads + grp * G
        self.s.emit("ATTN", q=self.a(qq) + h0 * hdl, qexp=self.a(qe) + h0, kv=self.a(ks, "spad"),
                    state=self.a("state", "vbuf") + row * attn_state_lines(G, hdl), nq=G, hd=hdl, t=0,
                    page_log2=kv.page_log2, offset=0, causal=1, init=init,
                    reads=[self.key(qq), self.key(qe), f"spad:{ks}", "vbuf:state"], writes=["vbuf:state"],
                    patches=patches)

    def _elementwise(self, n: Node, op: str, **extra) -> None:
        dst = n.outputs[0]
        srcs = dict(zip(("a", "b") if len(n.inputs) == 2 else ("src",), (self.a(t) for t in n.inputs), strict=True))
        self.s.emit(op, dst=self.a(dst), rows=self.rows_of(dst), lines=self.lines(dst), **srcs, **extra,
                    reads=[self.key(t) for t in n.inputs], writes=[self.key(dst)],
                    patches=self.n_rows("rows", rows=self.rows_of(dst)))

    def add(self, n: Node) -> None:
        self._elementwise(n, "ADD")

    def mul(self, n: Node) -> None:
        self._elementwise(n, "MUL", shift=nx.FX_FRAC)

    def silu(self, n: Node) -> None:
        self._elementwise(n, "SILU")

    def gelu(self, n: Node) -> None:
        self._elementwise(n, "GELU")


def generate(g: Graph, qm, cfg, plan: ProgramPlan, mats, kv: KvGeometry, regions, rows_bytes, max_pages: int,
             batched: bool = False):
    """Lower the graph for ``plan.rows`` rows (``batched``: one sequence per row); returns the scheduled
    :class:`Emitted` list (FINISH last)."""
    gen = _Gen(g, qm, cfg, plan, mats, kv, regions, rows_bytes, max_pages, batched)
    i = 0
    while i < len(g.nodes):
        if i in plan.grouped:  # an attention block by GQA group, beside the weight streams
            emit_grouped(gen, g.nodes[i:i + len(BLOCK)])
            i += len(BLOCK)
            continue
        getattr(gen, g.nodes[i].op)(g.nodes[i])
        i += 1
    return gen.s.finish(), gen.s
