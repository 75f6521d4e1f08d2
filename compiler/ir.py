"""The compiler's graph IR: one transformer step over T token rows, as a list of row-wise nodes.

Every node of the quantized model (docs/quantization.md) works on whole rows, one row per
token (or per head of a token), so one graph serves prefill (T = the chunk) and decode
(T = 1); the number of rows is a parameter of code generation, not of the graph.

Tensors are declared with where they live and their row shape:

- ``vbuf``: fx int32 rows; ``exps``: scratchpad exponent lines; ``spad``: int8 rows.
- a row of a tensor is ``heads`` segments of ``elems`` elements, each segment padded to whole
  lines (``ceil(elems / cols)``), so a head always starts on a line boundary.
- ``last=True``: only the last token's row exists (the logits path of a prefill chunk).

:func:`verify` checks the graph between passes: single assignment, use after definition,
and the per-op shape rules of :data:`OPS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from systolica.model import ModelConfig

__all__ = ["TensorDecl", "Node", "Graph", "IRError", "OPS", "build_graph", "verify"]


class IRError(ValueError):
    """A graph that breaks an IR rule; names the node and the tensor."""


@dataclass(frozen=True)
class TensorDecl:
    name: str
    space: str  # "vbuf" | "spad" | "exps"
    heads: int  # segments per token row
    elems: int  # real elements per segment
    last: bool = False  # only the last token's row
    per_head_exps: bool = False  # exps: one line per head (else one per token)
    buffer: str | None = None  # a named buffer shared by several tensors (the residual stream "x")
    split: bool = False  # twice the rows: QUANT split=1's int8 parts then residuals, or their GEMM results

    def lines(self, cols: int) -> int:
        """Lines of one token row."""
        return self.heads * -(-self.elems // cols)

    def seg_lines(self, cols: int) -> int:
        return -(-self.elems // cols)


@dataclass
class Node:
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        a = " ".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{', '.join(self.outputs) or '-'} = {self.op}({', '.join(self.inputs)}) {a}".rstrip()


#: op -> (number of inputs, number of outputs)
OPS: dict[str, tuple[int, int]] = {
    "embed": (0, 1), "norm": (1, 1), "quant": (1, 2), "linear": (2, 1), "logits": (2, 0), "rope": (1, 1),
    "kv_store": (4, 0), "attention": (2, 1), "add": (2, 1), "silu": (1, 1), "gelu": (1, 1), "mul": (2, 1),
    "glu": (2, 1),  # mul(silu(linear(gate)), linear(up)): SwiGLU
}


@dataclass
class Graph:
    config: ModelConfig
    act_split: bool = False  # linear inputs quantized with QUANT split=1 (QuantModel.act_split)
    tensors: dict[str, TensorDecl] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)

    def decl(self, name: str, space: str, heads: int, elems: int, **kw) -> str:
        if name in self.tensors:
            raise IRError(f"tensor {name!r} declared twice")
        self.tensors[name] = TensorDecl(name, space, heads, elems, **kw)
        return name

    def add(self, op: str, inputs, outputs, **attrs) -> Node:
        n = Node(op, tuple(inputs), tuple(outputs), attrs)
        self.nodes.append(n)
        return n

    def live_ranges(self) -> dict[str, tuple[int, int]]:
        """``{tensor: (index of the defining node, index of the last reading node)}``."""
        out: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in n.outputs:
                out.setdefault(t, [i, i])
            for t in n.inputs:
                out.setdefault(t, [i, i])[1] = i
        return {k: (v[0], v[1]) for k, v in out.items()}

    def __str__(self) -> str:
        return "\n".join(f"{i:4d}  {n}" for i, n in enumerate(self.nodes))


def build_graph(cfg: ModelConfig, act_split: bool = False, head: bool = True, head_rows: str = "last") -> Graph:
    """The graph of one step of a llama or GPT-2 model (see docs/quantization.md).

    ``act_split``: every linear layer's input is quantized with QUANT ``split=1`` (int8 part and
    int8 residual, twice the rows) and its GEMM result rows are requantized and added in pairs.
    ``head=False``: the graph ends with the last layer (no final norm, no logits): a prefill chunk
    that is not the prompt's last only fills the KV cache.  ``head_rows="all"``: the final norm and the
    logits for every row (a batched decode step: one sequence per row), not only the last.
    """
    if head_rows not in ("last", "all"):
        raise ValueError(f"head_rows={head_rows!r}: 'last' or 'all'")
    last = head_rows == "last"
    cfg.check()
    g = Graph(cfg, act_split=bool(act_split))
    H, Hkv, hd, D, F = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.dim, cfg.ffn_dim
    gpt2 = cfg.arch == "gpt2"
    norm = "layer" if gpt2 else "rms"

    def bias(name: str) -> str | None:
        return name + "_b" if gpt2 else None

    x = g.decl("x0", "vbuf", 1, D, buffer="x")
    g.add("embed", [], [x], positions=gpt2)
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        h = g.decl(f"{p}h1", "vbuf", 1, D)
        g.add("norm", [x], [h], weight=p + "attn_norm", kind=norm)
        hq, he = g.decl(f"{p}h1q", "spad", 1, D), g.decl(f"{p}h1e", "exps", 1, D)
        g.add("quant", [h], [hq, he])
        qkv = {}
        for w, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
            t = g.decl(f"{p}{w}", "vbuf", heads, hd)
            g.add("linear", [hq, he], [t], weight=f"{p}attn_{w}", bias=bias(f"{p}attn_{w}"), in_heads=1,
                  out_heads=heads)
            qkv[w] = t
        if not gpt2:
            for w, heads in (("q", H), ("k", Hkv)):
                t = g.decl(f"{p}{w}r", "vbuf", heads, hd)
                g.add("rope", [qkv[w]], [t])
                qkv[w] = t
        quant = {}
        for w, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
            tq = g.decl(f"{p}{w}q", "spad", heads, hd)
            te = g.decl(f"{p}{w}e", "exps", heads, hd, per_head_exps=True)
            g.add("quant", [qkv[w]], [tq, te])
            quant[w] = (tq, te)
        g.add("kv_store", [*quant["k"], *quant["v"]], [], layer=i)
        o = g.decl(f"{p}o", "vbuf", H, hd)
        g.add("attention", list(quant["q"]), [o], layer=i)
        oq, oe = g.decl(f"{p}oq", "spad", H, hd), g.decl(f"{p}oe", "exps", H, hd)
        g.add("quant", [o], [oq, oe])
        ao = g.decl(f"{p}ao", "vbuf", 1, D)
        g.add("linear", [oq, oe], [ao], weight=p + "attn_output", bias=bias(p + "attn_output"), in_heads=H,
              out_heads=1)
        x2 = g.decl(f"x{2 * i + 1}", "vbuf", 1, D, buffer="x")
        g.add("add", [x, ao], [x2])
        x = x2
        h2 = g.decl(f"{p}h2", "vbuf", 1, D)
        g.add("norm", [x], [h2], weight=p + "ffn_norm", kind=norm)
        h2q, h2e = g.decl(f"{p}h2q", "spad", 1, D), g.decl(f"{p}h2e", "exps", 1, D)
        g.add("quant", [h2], [h2q, h2e])
        if gpt2:
            up = g.decl(f"{p}up", "vbuf", 1, F)
            g.add("linear", [h2q, h2e], [up], weight=p + "ffn_up", bias=bias(p + "ffn_up"), in_heads=1, out_heads=1)
            act = g.decl(f"{p}act", "vbuf", 1, F)
            g.add("gelu", [up], [act])
        else:
            # act = mul(silu(gate), up), fused so that gate and up are on chip one column block at a time
            act = g.decl(f"{p}act", "vbuf", 1, F)
            g.add("glu", [h2q, h2e], [act], gate=p + "ffn_gate", up=p + "ffn_up")
        aq, ae = g.decl(f"{p}actq", "spad", 1, F), g.decl(f"{p}acte", "exps", 1, F)
        g.add("quant", [act], [aq, ae])
        dn = g.decl(f"{p}down", "vbuf", 1, D)
        g.add("linear", [aq, ae], [dn], weight=p + "ffn_down", bias=bias(p + "ffn_down"), in_heads=1, out_heads=1)
        x2 = g.decl(f"x{2 * i + 2}", "vbuf", 1, D, buffer="x")
        g.add("add", [x, dn], [x2])
        x = x2
    if head:
        hf = g.decl("hf", "vbuf", 1, D, last=last)
        g.add("norm", [x], [hf], weight="output_norm", kind=norm)
        fq, fe = g.decl("hfq", "spad", 1, D, last=last), g.decl("hfe", "exps", 1, D, last=last)
        g.add("quant", [hf], [fq, fe])
        g.add("logits", [fq, fe], [], weight="output", vocab=cfg.vocab_size)
    if act_split:
        _mark_split(g)
    verify(g)
    return g


def _mark_split(g: Graph) -> None:
    """Quantize the inputs of every linear layer with split=1; their outputs get room for both halves."""
    import dataclasses

    producer = {t: n for n in g.nodes for t in n.outputs}
    for n in g.nodes:
        if n.op not in ("linear", "glu", "logits"):
            continue
        for t in list(n.inputs) + list(n.outputs):
            g.tensors[t] = dataclasses.replace(g.tensors[t], split=True)
        producer[n.inputs[0]].attrs["split"] = True


def _same_row(a: TensorDecl, b: TensorDecl) -> bool:
    return (a.heads, a.elems) == (b.heads, b.elems)


def verify(g: Graph, weights: dict[str, tuple[int, ...]] | None = None) -> None:
    """Raise :class:`IRError` for the first broken rule; ``weights`` maps weight names to shapes when known."""
    defined: set[str] = set()
    for idx, n in enumerate(g.nodes):
        where = f"node {idx} ({n})"
        if n.op not in OPS:
            raise IRError(f"{where}: unknown op {n.op!r}; ops: {', '.join(OPS)}")
        n_in, n_out = OPS[n.op]
        if (len(n.inputs), len(n.outputs)) != (n_in, n_out):
            raise IRError(f"{where}: {n.op} takes {n_in} inputs and {n_out} outputs, "
                          f"got {len(n.inputs)} and {len(n.outputs)}")
        for t in n.inputs:
            if t not in g.tensors:
                raise IRError(f"{where}: input {t!r} is not declared")
            if t not in defined:
                raise IRError(f"{where}: input {t!r} is read before any node writes it")
        for t in n.outputs:
            if t not in g.tensors:
                raise IRError(f"{where}: output {t!r} is not declared")
            if t in defined:
                raise IRError(f"{where}: output {t!r} is written twice (the IR is single-assignment)")
            defined.add(t)
        ins = [g.tensors[t] for t in n.inputs]
        outs = [g.tensors[t] for t in n.outputs]
        _check_node(where, n, ins, outs, g.config, weights)


def _check_node(where, n, ins, outs, cfg, weights) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise IRError(f"{where}: {msg}")

    spaces = [t.space for t in ins], [t.space for t in outs]
    if n.op in ("norm", "rope", "silu", "gelu", "add", "mul"):
        need(all(s == "vbuf" for s in spaces[0] + spaces[1]), f"{n.op} works on vbuf tensors, got {spaces}")
        need(all(_same_row(ins[0], t) for t in ins + outs), f"{n.op} operands differ in row shape")
    if n.op == "norm":
        need(not ins[0].last or outs[0].last, "a norm of the last row only must produce the last row only")
    if n.op == "rope":
        need(cfg.arch == "llama", "RoPE is llama-only")
    if n.op == "quant":
        need(spaces == (["vbuf"], ["spad", "exps"]), f"quant maps vbuf -> (spad, exps), got {spaces}")
        split = bool(n.attrs.get("split"))
        need(outs[0].split == split and outs[1].split == split,
             "a split quant doubles the rows of both outputs (and only a split quant does)")
        need(not (split and outs[1].per_head_exps), "per-head quantization (attention) is never split")
        need(_same_row(ins[0], outs[0]) and _same_row(ins[0], outs[1]), "quant changes the row shape")
    if n.op == "glu":
        need(spaces == (["spad", "exps"], ["vbuf"]), f"glu maps (spad, exps) -> vbuf, got {spaces}")
        if weights is not None:
            for k in ("gate", "up"):
                w = weights.get(n.attrs[k])
                need(w is not None, f"weight {n.attrs[k]!r} is missing")
                need(w == (outs[0].elems, ins[0].heads * ins[0].elems),
                     f"weight {n.attrs[k]!r} has shape {w}, glu wants {(outs[0].elems, ins[0].heads * ins[0].elems)}")
    if n.op in ("linear", "glu"):
        need(outs[0].split == ins[0].split, f"{n.op} of a split input needs room for both result halves")
    if n.op in ("linear", "logits"):
        need(spaces[0] == ["spad", "exps"], f"{n.op} reads (spad, exps), got {spaces[0]}")
        a = ins[0]
        k_elems = a.heads * a.elems
        if weights is not None:
            w = weights.get(n.attrs["weight"])
            need(w is not None, f"weight {n.attrs['weight']!r} is missing")
            need(w[1] == k_elems, f"weight {n.attrs['weight']!r} has {w[1]} inputs, the activation {a.name!r} "
                                  f"has {k_elems} elements")
            if n.op == "linear":
                o = outs[0]
                need(w[0] == o.heads * o.elems, f"weight {n.attrs['weight']!r} has {w[0]} outputs, "
                                                f"{o.name!r} has {o.heads * o.elems}")
        need(n.attrs.get("in_heads", a.heads) == a.heads, "in_heads does not match the activation's heads")
        if n.op == "linear":
            need(outs[0].space == "vbuf", "linear writes a vbuf tensor")
            need(n.attrs.get("out_heads", 1) == outs[0].heads, "out_heads does not match the output's heads")
    if n.op == "kv_store":
        need(spaces[0] == ["spad", "exps", "spad", "exps"], f"kv_store reads (kq, ke, vq, ve), got {spaces[0]}")
        need(all(t.heads == cfg.n_kv_heads and t.elems == cfg.head_dim for t in ins),
             f"kv_store wants {cfg.n_kv_heads} heads of {cfg.head_dim}")
        need(ins[1].per_head_exps and ins[3].per_head_exps, "the KV cache keeps one exponent per head")
    if n.op == "attention":
        need(spaces == (["spad", "exps"], ["vbuf"]), f"attention maps (spad, exps) -> vbuf, got {spaces}")
        need(ins[0].heads == cfg.n_heads and ins[1].per_head_exps, "attention wants per-head quantized queries")
        need(_same_row(ins[0], outs[0]), "attention output must have the query's row shape")
