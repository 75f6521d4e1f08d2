"""On-chip planning: every block of a program of ``rows`` token rows in the scratchpad, accumulator and vector buffer.

:func:`plan_program` allocates the graph's tensors first-fit over their live ranges
(:class:`~systolica.compiler.memory.OnChipPlan`), the KV-tile slots, and the output blocks of the tiled matrices
(as tall as the accumulator and the vector buffer allow); :mod:`systolica.compiler.codegen` then emits the
instructions on those blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from systolica.compiler.gqa_groups import grouped_blocks, qkv_mult_span, widen_live
from systolica.compiler.image import KvGeometry, MatrixInfo
from systolica.compiler.ir import Graph
from systolica.compiler.kv_page import KV_SPAD_SHARE
from systolica.compiler.memory import MemoryError_, OnChipPlan
from systolica.compiler.tiling import MatrixTiling, tile_matrix
from systolica.layout import attn_state_lines, lines_for

__all__ = ["KV_SLOTS_MAX", "ProgramPlan", "logit_rows", "plan_program", "used_matrices"]


@dataclass
class ProgramPlan:
    rows: int
    chip: OnChipPlan
    tilings: dict[str, MatrixTiling]
    addr: dict[str, int]  # block key "buf:name" -> line address
    overlaps: dict[str, tuple[str, ...]]
    alias: dict[str, str]  # vbuf tensor -> the tensor whose lines it reuses (in-place element-wise ops)
    kv_slots: int = 2  # KV-tile slots in the scratchpad (kv0, kv1, ...): LOADs run that many tiles ahead of ATTN
    grouped: tuple[int, ...] = ()  # first nodes of the attention blocks emitted by GQA group (compiler.gqa_groups)


def _tensor_lines(t, rows: int, cols: int) -> int:
    r = (1 if t.last else rows) * (2 if t.split else 1)
    if t.space == "exps":
        return r * (t.heads if t.per_head_exps else 1)
    return r * t.lines(cols)


def used_matrices(g: Graph) -> set[str]:
    """The matrices the graph's matmuls read (a head-less prefill graph reads no ``output``)."""
    keys = {"linear": ("weight",), "logits": ("weight",), "glu": ("gate", "up")}
    return {nd.attrs[k] for nd in g.nodes for k in keys.get(nd.op, ())}


def logit_rows(g: Graph, rows: int) -> int:
    """Rows whose logits a program of ``rows`` rows computes: the last only, or all (a batched decode step)."""
    t = g.tensors.get("hfq")
    return 0 if t is None else (1 if t.last else rows)


#: KV-tile slots a program takes when the scratchpad has room (:func:`plan_program`)
KV_SLOTS_MAX = 3


def plan_program(g: Graph, mats: dict[str, MatrixInfo], cfg, kv: KvGeometry, rows: int, batched: bool = False
                 ) -> ProgramPlan:
    """Allocate every on-chip block of a program of ``rows`` token rows (``batched``: one sequence per row);
    raises MemoryError_ when it does not fit.

    Three KV-tile slots when they take at most 1 / KV_SPAD_SHARE of the scratchpad and the rest still fits, else
    two (see :func:`_plan_program`)."""
    tile_lines = kv.tile_bytes // cfg.cols
    if KV_SLOTS_MAX * tile_lines <= cfg.spad_lines // KV_SPAD_SHARE:
        try:
            return _plan_program(g, mats, cfg, kv, rows, KV_SLOTS_MAX, batched)
        except MemoryError_:
            pass
    return _plan_program(g, mats, cfg, kv, rows, 2, batched)


def _plan_program(g: Graph, mats: dict[str, MatrixInfo], cfg, kv: KvGeometry, rows: int, kv_slots: int,
                  batched: bool) -> ProgramPlan:
    """:func:`plan_program` with ``kv_slots`` KV-tile slots.

    Weights stay in DRAM (GEMM_STREAM), so the scratchpad holds only activations and the KV-tile slots: with
    two, one loads while ATTN reads the other; a third lets the LOADs of a head's next pages run ahead of ATTN
    across a page whose LOAD came late (the first of each KV head's, and decode's, whose LOADs start early:
    :meth:`systolica.compiler.codegen._Gen.kv_store`).
    The vector-buffer slots whose size follows the output blocks (mult rows, logits, SwiGLU's gate and up
    blocks) go last, and the blocks are as tall as the accumulator allows and those slots still fit."""
    c, cols = g.config, cfg.cols
    mats = {name: m for name, m in mats.items() if name in used_matrices(g)}
    chip = OnChipPlan.for_config(cfg)
    Dl, hdl, G = lines_for(c.dim, cols), kv.hd_lines, c.group
    grouped = grouped_blocks(g, cfg, rows, batched)
    live = widen_live(g, g.live_ranges(), grouped)
    tile_lines = kv.tile_bytes // cols
    for s in range(kv_slots):
        chip.spad.alloc(f"kv{s}", tile_lines)
    for name, t in g.tensors.items():  # scratchpad tensors by live range
        if t.space in ("spad", "exps"):
            chip.spad.alloc(name, _tensor_lines(t, rows, cols), *live[name])
    for i, nd in enumerate(g.nodes):  # each attention's tail tile (_Gen.attention), in lines dead there
        if nd.op == "attention":
            chip.spad.alloc(f"kvt{nd.attrs['layer']}", tile_lines, i, i)
    k = 2 if g.act_split else 1  # GEMM rows per token row
    head_rows = logit_rows(g, rows)
    m_rows = {name: k * (head_rows if name == "output" else rows) for name in mats}
    chip.vbuf.alloc("x", rows * Dl)
    chip.vbuf.alloc("gamma", (2 if c.arch == "gpt2" else 1) * Dl)
    if c.arch == "gpt2":
        chip.vbuf.alloc("pos", rows * Dl)
        chip.vbuf.alloc("bias", max(m.Nl for m in mats.values() if m.bias_off is not None))
    else:
        chip.vbuf.alloc("rope", rows * hdl)
    chip.vbuf.alloc("state", rows * attn_state_lines(G, hdl))
    alias = _inplace_aliases(g, live, cols)
    span = {}
    for name, rep in alias.items():  # a representative lives as long as every tensor sharing its lines
        lo, hi = span.get(rep, live[rep])
        span[rep] = (min(lo, live[name][0]), max(hi, live[name][1]))
    for name, t in g.tensors.items():
        if t.space == "vbuf" and t.buffer is None and alias.get(name, name) == name:
            chip.vbuf.alloc(name, _tensor_lines(t, rows, cols), *span.get(name, live[name]))
    spans = [qkv_mult_span([mats[nd.attrs["weight"]] for nd in g.nodes[i:i + 3]], cols) for i in grouped]
    qkv_mult = max((sp[0] for sp in spans if sp is not None), default=0)
    gates = [nd.attrs["gate"] for nd in g.nodes if nd.op == "glu"]
    glu_mats = set(gates) | {nd.attrs["up"] for nd in g.nodes if nd.op == "glu"}

    def tile_all(cap_glu: int | None, cap: int | None) -> dict[str, MatrixTiling]:
        return {name: tile_matrix(name, m.Nl, m.Kl, cfg.acc_lines, m_rows[name], cap_glu if name in glu_mats else cap)
                for name, m in mats.items()}

    def slots(tl: dict[str, MatrixTiling]) -> dict[str, int]:
        """Lines of each vector-buffer block the output blocks of ``tl`` need: mult rows and logits double
        buffered, one gate and one up block."""
        mslot, lg = max(t.nt for t in tl.values()), k * head_rows * tl["output"].nt if "output" in tl else 0
        out = {"m0": mslot, "lg0": lg, "m1": mslot, "lg1": lg} if lg else {"m0": mslot, "m1": mslot}
        if qkv_mult:  # a grouped block's Q, K and V mult rows, one LOAD before it (gqa_groups._block_mult)
            out["mqkv"] = qkv_mult
        if gates:
            out["gbuf"] = out["ubuf"] = k * rows * max(tl[w].nt for w in gates)
        return out

    free = cfg.vbuf_lines - chip.vbuf.peak()
    tilings = tile_all(None, None)

    def fits(cap_glu: int, cap: int) -> bool:
        return sum(slots(tile_all(cap_glu, cap)).values()) <= free

    if sum(slots(tilings).values()) > free:
        # The tallest blocks whose slots still fit: first one cap for every matrix, then, SwiGLU's gate and up
        # blocks (whose slots grow with the rows) kept at that, a taller one for the others.
        top = max(t.nt for t in tilings.values())
        cap_glu = _largest(lambda c: fits(c, c), top)
        if cap_glu == 0:
            need = slots(tile_all(1, 1))
            raise MemoryError_(f"vbuf overflow: after activations ({chip.vbuf.peak()} lines) only {free} of "
                               f"{cfg.vbuf_lines} lines remain, fewer than the {sum(need.values())} that "
                               f"one-line output blocks need ({', '.join(f'{b} {v}' for b, v in need.items())}); "
                               "use a smaller prefill chunk or a config with a bigger vector buffer")
        cap = cap_glu + _largest(lambda c: fits(cap_glu, cap_glu + c), top - cap_glu)
        tilings = tile_all(cap_glu, cap)
    chip.acc.alloc("acc", max(t.nt * m_rows[n] for n, t in tilings.items()))
    for b, size in slots(tilings).items():
        chip.vbuf.alloc(b, size)
    addr, spans = {}, {}
    for b in ("spad", "acc", "vbuf"):
        for name, blk in chip.buf(b).blocks.items():
            addr[f"{b}:{name}"] = blk.lo
            spans[f"{b}:{name}"] = (b, blk.lo, blk.lo + blk.size)
    for name, rep in alias.items():
        addr[f"vbuf:{name}"] = addr[f"vbuf:{rep}"]
    overlaps = {k: tuple(k2 for k2, (b2, lo2, hi2) in spans.items() if b2 == b and lo2 < hi and lo < hi2)
                for k, (b, lo, hi) in spans.items()}
    return ProgramPlan(rows, chip, tilings, addr, overlaps, alias, kv_slots, tuple(grouped))


def _largest(ok, hi: int) -> int:
    """The largest ``c`` in ``1..hi`` with ``ok(c)`` (``ok`` true up to some point, false after), or 0."""
    lo = 0  # ok(lo) (0: vacuously)
    hi += 1  # not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


_INPLACE = ("silu", "gelu", "mul", "rope")


def _inplace_aliases(g: Graph, live: dict, cols: int) -> dict[str, str]:
    """Element-wise ops write over an input that dies there (every op reads all operands before writing)."""
    alias: dict[str, str] = {}
    for i, n in enumerate(g.nodes):
        if n.op not in _INPLACE:
            continue
        out = g.tensors[n.outputs[0]]
        for t in n.inputs:
            src = g.tensors[t]
            if (src.buffer is None and live[t][1] == i and src.lines(cols) == out.lines(cols) and src.last == out.last
                    and src.split >= out.split):
                alias[out.name] = alias.get(t, t)
                break
    return alias
