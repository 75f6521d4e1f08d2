"""The DRAM image: every quantized tensor padded to whole lines and placed in its region.

Padding rules (zeros everywhere, so padded lanes contribute nothing to any dot product, norm or
maximum, and stay zero through every row-wise op):

- a matrix of ``N x K`` becomes ``Nl*cols`` rows of ``Kl*cols`` int8 (zero padded); when its output
  (input) is split in heads, each head's rows (columns) start on a line boundary, so head ``h``
  element ``e`` sits at ``h * ceil(hd/cols) * cols + e``; its ``mult`` row and bias are scattered the
  same way.  The int8 weights are stored once, in the weight-stream layout GEMM_STREAM reads
  (:mod:`systolica.wstream`): every matrix in one page-aligned ``weights`` region, each at its own
  offset ``x0`` of every port's stream, one after the other (``x0`` stays a multiple of a line, so
  the ``w`` field of any block of whole output lines is line aligned);
- fx vectors are padded to whole vbuf lines; a LayerNorm's beta follows its gamma;
- a RoPE row is ``hd' / 2`` cos then ``hd' / 2`` sin with ``hd' = ceil(hd/cols)*cols`` (the padded
  pairs rotate zeros);
- the KV cache is ``layers x pages x kv heads`` tiles of :func:`systolica.layout.kv_tile`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica import wstream, wstream4
from systolica.compiler.ir import Graph
from systolica.compiler.memory import DramLayout, MemoryError_, dram_align
from systolica.layout import WPAGE, kv_tile, lines_for

__all__ = ["KvGeometry", "MatrixInfo", "build_image", "scatter_index"]


@dataclass(frozen=True)
class KvGeometry:
    """Where the paged KV cache lives and how a page is laid out."""

    base: int  # byte offset of the KV region
    page: int  # tokens per page (P)
    page_log2: int
    n_pages: int  # physical pages per layer
    heads: int  # kv heads per page
    hd_lines: int  # lines per head row
    tile_bytes: int  # bytes of one kv head's tile
    layers: int

    @property
    def page_bytes(self) -> int:
        return self.heads * self.tile_bytes

    def page_addr(self, layer: int, phys: int) -> int:
        return self.base + (layer * self.n_pages + phys) * self.page_bytes

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("base", "page", "page_log2", "n_pages", "heads", "hd_lines",
                                              "tile_bytes", "layers")}


@dataclass(frozen=True)
class MatrixInfo:
    name: str
    N: int
    K: int
    Nl: int
    Kl: int
    w_region: int  # byte offset of the (page-aligned) weight-stream region
    w_x0: int  # offset of the matrix in each port's stream of that region (a multiple of a line)
    mult_off: int
    shift: int  # REQUANT shift field
    bias_off: int | None
    wfmt: int = 0  # GEMM_STREAM.wfmt (isa.WFmt): INT8, or 4-bit codes with group scales (systolica.wstream4)
    gshift: int = 0  # GEMM_STREAM.gshift of the 4-bit formats

    def row_bytes(self, cfg) -> int:
        """Bytes one output line (all ``Kl`` K lines) adds to each weight port's stream, in this matrix's format."""
        return wstream.port_row_bytes(self.Kl, cfg) if self.wfmt == 0 else \
            wstream4.port_row_bytes(self.Kl, self.wfmt, cfg)

    def w_addr(self, n0: int, cfg) -> int:
        """GEMM_STREAM's ``w`` for the block of output lines from ``n0`` (all ``Kl`` K lines)."""
        return wstream.address(self.w_region, self.w_x0 + n0 * self.row_bytes(cfg), cfg)


def scatter_index(n: int, heads: int, cols: int) -> np.ndarray:
    """Padded position of each of ``n`` elements split into ``heads`` segments padded to whole lines."""
    seg = n // heads
    sl = lines_for(seg, cols) * cols
    e = np.arange(n)
    return (e // seg) * sl + e % seg


def _put(img: bytearray, off: int, arr: np.ndarray) -> None:
    b = np.ascontiguousarray(arr).tobytes()
    img[off:off + len(b)] = b


def build_image(g: Graph, qm, cfg, *, page: int, n_pages: int, max_seq: int, logit_rows: int = 1,
                fill: bool = True):
    """Lay out and fill the DRAM image.

    ``fill=False`` lays it out only (the same regions, matrices and KV geometry; an empty image): what
    lowering needs, for a compile of the programs alone (:mod:`systolica.compiler.programs_only`); of the
    weights only their shapes and REQUANT shifts are read.

    Returns
    -------
    (DramLayout, bytearray, dict[str, MatrixInfo], KvGeometry, dict)
        The layout (regions), the initialised bytes (weights and tables; the KV cache and the
        logits follow and start as zeros), the matrices, the KV geometry and a dict of row sizes.
    """
    c, cols = g.config, cfg.cols
    lay = DramLayout(cfg.dram_bytes, dram_align(cols))
    D, hd = c.dim, c.head_dim
    Dl, hdl = lines_for(D, cols), lines_for(hd, cols)
    parts: list[tuple[int, np.ndarray]] = []
    mats: dict[str, MatrixInfo] = {}
    heads = {}
    for n in g.nodes:
        if n.op in ("linear", "logits"):
            heads[n.attrs["weight"]] = (n.attrs.get("out_heads", 1), n.attrs.get("in_heads", 1), n.attrs.get("bias"))
        elif n.op == "glu":
            heads[n.attrs["gate"]] = heads[n.attrs["up"]] = (1, 1, None)
    if WPAGE % cols:
        raise MemoryError_(f"cols={cols} does not divide the {WPAGE}-byte weight-stream page: GEMM_STREAM's w "
                           "would leave the line grid at a page crossing; use a power-of-two cols")
    shapes = {}  # name -> (N, K, Nl, Kl, port offset x0)
    x = 0
    for name, (oh, ih, _bias) in heads.items():
        qmat = qm.mats[name]
        N, K = qmat.shape
        Nl, Kl = oh * lines_for(N // oh, cols), ih * lines_for(K // ih, cols)
        shapes[name] = (N, K, Nl, Kl, x)
        if qmat.wfmt:  # 4-bit groups of 32 along K must keep their places: only K's end may be padded
            if (ih > 1 and (K // ih) % cols) or not wstream4.whole_groups(Kl, cfg):
                raise MemoryError_(f"tensor {name!r}: its 4-bit groups of 32 along K={K} ({ih} head(s)) do not stay "
                                   f"whole in lines of cols={cols}; compile it with --weights int8")
            x += wstream4.port_bytes(Nl, Kl, qmat.wfmt, cfg)  # whole lines: every x0 is line aligned
        else:
            x += wstream.port_bytes(Nl, Kl, cfg)  # a multiple of cols: every x0 is line aligned
    # one region of whole page groups for every matrix's streams (P interleaved pages per 4 KiB of a port)
    rw = lay.add("weights", wstream.port_span(x, cfg), "weight", align=WPAGE)
    streams: list[tuple[int, np.ndarray]] = []  # (w of the matrix's first output line, per-port streams)
    for name, (oh, ih, bias) in heads.items():
        qmat = qm.mats[name]
        N, K, Nl, Kl, x0 = shapes[name]
        ri = scatter_index(N, oh, cols)
        if fill and qmat.wfmt:  # codes (zero padded; padded rows have zero scales, padded K zero activations)
            codes = np.zeros((Nl * cols, Kl * cols), np.uint8)
            codes[ri, :K] = qmat.codes
            scales = np.zeros((Nl * cols, Kl * cols // 32), np.int64)
            scales[ri, :qmat.D.shape[1]] = qmat.D
            mins = None
            if qmat.Mn is not None:
                mins = np.zeros_like(scales)
                mins[ri, :qmat.Mn.shape[1]] = qmat.Mn
            streams.append((wstream.address(rw.offset, x0, cfg), wstream4.port_streams(codes, scales, mins, cfg)))
            del codes
        elif fill:
            ci = scatter_index(K, ih, cols)
            w = np.zeros((Nl * cols, Kl * cols), np.int8)
            w[np.ix_(ri, ci)] = qmat.q
            streams.append((wstream.address(rw.offset, x0, cfg), wstream.port_streams(w, cfg)))
            del w
        rm = lay.add(f"mult:{name}", Nl * cols * 4, "weight")  # int32 per padded output row
        if fill:
            mult = np.zeros(Nl * cols, "<i4")
            mult[ri] = qmat.mult
            parts.append((rm.offset, mult))
        boff = None
        if bias is not None:
            rb = lay.add(f"bias:{bias}", Nl * cols * 4, "vector")
            if fill:
                b = np.zeros(Nl * cols, "<i4")
                b[ri] = qm.fx[bias]
                parts.append((rb.offset, b))
            boff = rb.offset
        mats[name] = MatrixInfo(name, N, K, Nl, Kl, rw.offset, x0, rm.offset, qmat.requant_shift, boff,
                                int(qmat.wfmt), int(getattr(qmat, "gshift", 0)))
    gpt2 = c.arch == "gpt2"
    for n in g.nodes:
        if n.op == "norm":
            w = n.attrs["weight"]
            r = lay.add(f"vec:{w}", (2 if gpt2 else 1) * Dl * cols * 4, "vector")
            if fill:
                vec = np.zeros((2 if gpt2 else 1, Dl * cols), "<i4")
                vec[0, :D] = qm.fx[w]
                if gpt2:
                    vec[1, :D] = qm.fx[w + "_b"]
                parts.append((r.offset, vec))
    r = lay.add("token_embd", c.vocab_size * Dl * cols * 4, "table")
    if fill:
        emb = np.zeros((c.vocab_size, Dl * cols), "<i4")
        emb[:, :D] = qm.fx["token_embd"]
        parts.append((r.offset, emb))
    rows = {"embd_row": Dl * cols * 4}
    if gpt2:
        r = lay.add("pos_embd", max_seq * Dl * cols * 4, "table")
        if fill:
            pe = np.zeros((max_seq, Dl * cols), "<i4")
            pe[:, :D] = qm.fx["position_embd"][:max_seq]
            parts.append((r.offset, pe))
        rows["pos_row"] = Dl * cols * 4
    else:
        hp = hdl * cols
        if hp % 2:
            raise MemoryError_(f"head_dim {hd} pads to {hp} elements (cols={cols}), an odd number: RoPE needs pairs")
        r = lay.add("rope", max_seq * hp * 4, "table")
        if fill:
            tab = np.zeros((max_seq, hp), "<i4")
            half = hd // 2
            src = qm.rope[:max_seq]
            tab[:, :half] = src[:, :half]
            tab[:, hp // 2:hp // 2 + half] = src[:, half:]
            parts.append((r.offset, tab))
        rows["rope_row"] = hp * 4
    init_end = lay.top
    page_log2 = page.bit_length() - 1
    tile = kv_tile(page_log2, hdl)
    tile_bytes = tile.lines * cols
    kvr = lay.add("kv", c.n_layers * n_pages * c.n_kv_heads * tile_bytes, "kv")
    kv = KvGeometry(kvr.offset, page, page_log2, n_pages, c.n_kv_heads, hdl, tile_bytes, c.n_layers)
    lay.add("logits", logit_rows * lines_for(c.vocab_size, cols) * cols * 4, "io")  # a row per batched sequence
    img = bytearray(init_end if fill else 0)
    for off, arr in parts:
        _put(img, off, arr)
    win = np.frombuffer(img, np.uint8)  # a writable view of img
    for w0, st in streams:
        wstream.scatter(win, w0, st, cfg)
    del win
    return lay, img, mats, kv, rows
