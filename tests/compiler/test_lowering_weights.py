"""Weights in DRAM once, in the weight-stream layout, and every matmul one GEMM_STREAM per output block."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import wstream
from systolica.compiler.compile import compile_model
from systolica.compiler.image import scatter_index
from systolica.compiler.ir import build_graph
from systolica.compiler.quantize_pass import quantize
from systolica.config import preset
from systolica.isa import Buf
from systolica.testmodels import random_model


def _board(name):
    from systolica.boards.board import load_board

    return load_board(name).config


CFGS = {"tiny": lambda: preset("tiny"), "default": lambda: preset("default"), "kv260": lambda: _board("kv260")}


@pytest.fixture(scope="module", params=list(CFGS))
def compiled(request):
    cfg = CFGS[request.param]()
    model = random_model("llama", dim=44, n_layers=2, n_heads=2, n_kv_heads=1, vocab=97, tied=True, max_seq=48, seed=2)
    art = compile_model(model, cfg, page=8, max_seq=48, prefill_chunk=8)
    g = build_graph(model.config)
    qm, _ = quantize(model, g, 48)
    return cfg, art, g, qm


def _uses(g):
    """Each matmul of the graph in program order: (weight, out_heads, in_heads)."""
    for n in g.nodes:
        if n.op in ("linear", "logits"):
            yield n.attrs["weight"], n.attrs.get("out_heads", 1), n.attrs.get("in_heads", 1)
        elif n.op == "glu":
            yield n.attrs["gate"], 1, 1
            yield n.attrs["up"], 1, 1


def test_image_holds_every_matrix_once_in_stream_layout(compiled):
    cfg, art, g, qm = compiled
    cols, man = cfg.cols, art.manifest
    ws = man["weights"]
    reg = art.region("weights")
    assert reg["offset"] % wstream.WPAGE == 0 and reg["size"] == wstream.port_span(ws["port_bytes"], cfg)
    assert not [r for r in man["regions"] if r["name"].startswith("w:")], "no row-major copy of the weights"
    win = art.image
    seen = set()
    for name, oh, ih in _uses(g):
        if name in seen:
            continue
        seen.add(name)
        q = qm.mats[name].q
        m = ws["matrices"][name]
        assert m["x0"] % cols == 0
        w = wstream.gather(win, wstream.address(reg["offset"], m["x0"], cfg), m["Nl"], m["Kl"], cfg)
        want = np.zeros((m["Nl"] * cols, m["Kl"] * cols), np.int8)
        want[np.ix_(scatter_index(q.shape[0], oh, cols), scatter_index(q.shape[1], ih, cols))] = q
        np.testing.assert_array_equal(w, want, err_msg=name)
    assert seen == set(ws["matrices"])
    stream = sum(wstream.port_bytes(m["Nl"], m["Kl"], cfg) for m in ws["matrices"].values())
    assert ws["port_bytes"] == stream and reg["size"] < stream * cfg.dma_ports + cfg.dma_ports * wstream.WPAGE


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_matmuls_are_gemm_streams_over_all_of_k(compiled, kind):
    """No GEMM and no weight LOAD: one GEMM_STREAM per output block, each block's w where its lines lie, all
    blocks of a matrix covering its output lines once; the scratchpad is loaded only with KV pages."""
    cfg, art, g, qm = compiled
    ws, reg = art.manifest["weights"], art.region("weights")
    ins = art.programs[kind].instrs()
    rows = art.rows(kind)
    assert not [i for i in ins if i.op == "GEMM"]
    kv = art.region("kv")
    spad_loads = [i for i in ins if i.op == "LOAD" and i.buf == Buf.SPAD]
    assert spad_loads and all(kv["offset"] <= i.dram < kv["offset"] + kv["size"] for i in spad_loads)
    streams = [i for i in ins if i.op == "GEMM_STREAM"]
    P = cfg.dma_ports
    blocks = {name: [] for name in ws["matrices"]}
    for s in streams:
        off = s.w - reg["offset"]
        x = off // (P * wstream.WPAGE) * wstream.WPAGE + off % wstream.WPAGE  # the port offset: address() inverted
        assert wstream.address(reg["offset"], x, cfg) == s.w
        (name, m), = [(n, m) for n, m in ws["matrices"].items()
                      if m["x0"] <= x < m["x0"] + wstream.port_bytes(m["Nl"], m["Kl"], cfg)]
        j0, r = divmod(x - m["x0"], wstream.port_row_bytes(m["Kl"], cfg))
        assert r == 0 and j0 + s.n <= m["Nl"]
        assert (s.k, s.m, s.acc) == (m["Kl"], (1 if name == "output" else rows), 0) and s.w % cfg.cols == 0
        blocks[name].append((j0, s.n))
    for name, uses in ((n, sum(u == n for u, *_ in _uses(g))) for n in ws["matrices"]):
        got, n0 = blocks[name], 0
        for j0, n in got:  # each use walks the output lines in order, block after block
            assert j0 == n0 % ws["matrices"][name]["Nl"], (name, got)
            n0 += n
        assert n0 == uses * ws["matrices"][name]["Nl"], (name, got)
    st = art.manifest["stats"][kind]
    assert st["per_op"]["GEMM_STREAM"] == len(streams)
    assert st["stream_bytes"] == sum(s.n * s.k * cfg.cols * cfg.cols for s in streams)
    assert st["weight_bytes"] > st["stream_bytes"]  # and the mult rows


def test_decode_reads_each_weight_once(compiled):
    cfg, art, g, qm = compiled
    ws = art.manifest["weights"]
    uses = [name for name, *_ in _uses(g)]
    want = sum(ws["matrices"][n]["Nl"] * ws["matrices"][n]["Kl"] * cfg.cols * cfg.cols for n in uses)
    assert art.manifest["stats"]["decode"]["stream_bytes"] == want
