"""The roofline of each board, for decode and prefill, beside what the performance model reaches.

Per board: the board's bandwidth roof (:func:`systolica.sim.roofline.board_bandwidth`: DRAM peak x
controller efficiency, or PL ports x port width x the accelerator clock, whichever is less); the
design's own bounds (weights streamed through ``dma_ports x dma_bits`` at the clock -- GEMM_STREAM --,
the one ``gmem0`` port LOAD reads through today, and ``rows x cols`` MACs a cycle); the tokens/s each
implies for the model (DRAM bytes per decode token; MACs per prefill token, and the weight bytes per
pass of a prefill chunk); and the fraction of the tightest bound the RTL-validated performance model
reaches.  Every figure carries its source: the board file's own note (``[S: ...]`` datasheet, ``[V]``
measured, ``[?]`` assumption), the configuration, the clock's basis (:func:`~systolica.boards.fit_status.clock_basis`),
the compiled artifact or the performance model.
"""

from __future__ import annotations

from typing import Any

from systolica.boards.board import Board
from systolica.boards.fit_status import figure_source
from systolica.config import AccelConfig
from systolica.sim.roofline import ModelWork, board_bandwidth

__all__ = ["board_roofline", "render_roofline", "roofline_sources", "figure_basis", "PERF_MODEL_SOURCE"]

PERF_MODEL_SOURCE = ("performance model (sim/perf.py; validated on the RTL: sim/perf_validate.py, a compiled tiny "
                     "llama's decode and prefill within 5% on the fast harness)")


def figure_basis(board: Board, key: str) -> str:
    """``kv260.toml dram_efficiency = 0.8 (assumption [?])``: a board-file figure and its basis."""
    note = figure_source(board, key)
    if "[V" in note:
        basis = "measured"
    elif "[S" in note:
        basis = "datasheet"
    elif "[?" in note:
        basis = "assumption"
    else:
        basis = "board file"
    value = getattr(board, key)
    return f"{board.name}.toml {key} = {value:g} ({basis}{': ' + note if note else ''})"


def _fig(value: float | None, unit: str, source: str) -> dict[str, Any]:
    return {"value": value, "unit": unit, "source": source}


def board_roofline(board: Board, cfg: AccelConfig, work: ModelWork, *, clock: dict, decode_context: int,
                   prompt_tokens: int, prefill_rows: int, decode_tps: float | None = None,
                   prefill_tps: float | None = None, prefill_passes: int | None = None) -> dict[str, Any]:
    """The board's and the design's roofs for ``work`` (decode and prefill) and the fractions the model reaches.

    Parameters
    ----------
    board, cfg
        The board file and the accelerator configuration on it.
    work
        The model's per-token work (``weight_bytes``: the compiled artifact's, tile padding included).
    clock
        :func:`~systolica.boards.fit_status.clock_basis` of ``cfg`` on ``board`` (``mhz`` and ``label``).
    decode_context
        Cached positions of the decode steps the model timed (their KV reads are part of a token's bytes).
    prompt_tokens, prefill_rows
        The prompt, and the rows of the prefill program: without ``prefill_passes``, whole chunks of
        ``prefill_rows`` and the rest one token at a time, each pass reading every weight once.
    prefill_passes
        The runs the runtime's schedule takes for the prompt (:func:`systolica.driver.runtime.prefill_runs`),
        each reading every weight once.
    decode_tps, prefill_tps
        What the performance model gives at ``clock`` (None: not modelled).
    """
    f = float(clock["mhz"])
    label = clock.get("label") or f"clock: {f:g} MHz"
    clk = f"{f:g} MHz ({clock.get('basis', 'given')} clock)"
    bw = board_bandwidth(dram_peak_gbps=board.window_peak_gbps or board.dram_peak_gbps,
                         dram_efficiency=board.dram_efficiency, pl_ports=board.pl_ports,
                         pl_port_bits=board.pl_port_bits, clock_mhz=f)
    peak_key = "window_peak_gbps" if board.window_peak_gbps else "dram_peak_gbps"
    peak_src = figure_basis(board, peak_key)
    if "[" not in figure_source(board, peak_key):  # a product of the bus width and the transfer rate
        peak_src += f", from {figure_basis(board, 'dram_bus_bits')} x {figure_basis(board, 'dram_mtps')}"
    gb = 1e9
    stream = cfg.dma_ports * cfg.dma_bytes * f * 1e6
    # a LOAD striped over load_ports ports still writes one scratchpad line (cols int8 bytes) a cycle
    load = min(cfg.load_ports * cfg.dma_bytes, cfg.cols if cfg.load_ports > 1 else cfg.dma_bytes) * f * 1e6
    load_why = (f"one {cfg.dma_bits}-bit port x {clk} (LOAD reads through gmem0 only: hw/accelerator.py)"
                if cfg.load_ports == 1 else
                f"min({cfg.load_ports} ports x {cfg.dma_bits} bits / 8, one scratchpad line of {cfg.cols} B) a cycle x "
                f"{clk} (LOAD striped over every port, one line a cycle into the scratchpad: hw/striped_reader.py)")
    peak = cfg.rows * cfg.cols * f * 1e6
    figs = {
        "dram": _fig(bw["dram"] / gb, "GB/s", f"{peak_src}; x {figure_basis(board, 'dram_efficiency')}"),
        "pl_ports": _fig(bw["pl"] / gb, "GB/s", f"{figure_basis(board, 'pl_ports')} x "
                                                f"{figure_basis(board, 'pl_port_bits')} / 8 x {clk}"),
        "board_roof": _fig(bw["roof"] / gb, "GB/s", f"min(DRAM, PL ports): the {bw['limit']} limit"),
        "design_stream": _fig(stream / gb, "GB/s", f"config {cfg.name}: dma_ports = {cfg.dma_ports} x dma_bits = "
                                                   f"{cfg.dma_bits} / 8 x {clk} (GEMM_STREAM: weights through every port)"),
        "design_load": _fig(load / gb, "GB/s", f"config {cfg.name}: {load_why}"),
        "design_peak": _fig(peak / 1e9, "GMAC/s", f"config {cfg.name}: rows x cols = {cfg.rows} x {cfg.cols} MACs a "
                                                  f"cycle x {clk}"),
    }
    tok_bytes = work.decode_bytes(decode_context)
    attain = min(bw["roof"], stream)
    dec = {
        "bytes_per_token": _fig(tok_bytes, "B", f"compiled artifact: {work.weight_bytes} weight bytes + "
                                                f"{decode_context} cached positions x {work.kv_bytes_per_position} KV bytes"),
        "board_tps": _fig(bw["roof"] / tok_bytes, "tok/s", "board roof / bytes per token"),
        "design_tps": _fig(stream / tok_bytes, "tok/s", "design stream bound / bytes per token"),
        "load_path_tps": _fig(min(bw["roof"], load) / tok_bytes, "tok/s", "min(board roof, LOAD port) / bytes per token"),
        "bound_tps": _fig(attain / tok_bytes, "tok/s", "min(board roof, design stream bound) / bytes per token"),
        "bound": "board roof" if bw["roof"] <= stream else "design stream bound",
    }
    if prefill_passes is not None:
        passes, how = prefill_passes, f"runs of at most {prefill_rows} rows"
    else:
        passes = prompt_tokens // prefill_rows + prompt_tokens % prefill_rows if prefill_rows > 0 else prompt_tokens
        how = f"chunks of {prefill_rows} rows, the rest one token a pass"
    reuse = prompt_tokens / max(passes, 1)
    pre_ctx = prompt_tokens // 2
    macs = work.macs_per_token(pre_ctx)
    pre_bounds = {"compute_tps": peak / macs, "board_tps": bw["roof"] * reuse / work.weight_bytes,
                  "design_tps": stream * reuse / work.weight_bytes}
    tight = min(pre_bounds, key=pre_bounds.get)
    pre = {
        "weight_reuse": _fig(reuse, "tokens per weight pass",
                             f"runtime schedule: {prompt_tokens} prompt tokens in {passes} pass{'es' if passes != 1 else ''} "
                             f"({how})"),
        "macs_per_token": _fig(macs, "MAC", f"model shape: {work.matmul_macs} weight MACs + attention at "
                                            f"{pre_ctx} positions"),
        "compute_tps": _fig(pre_bounds["compute_tps"], "tok/s", "design peak / MACs per token"),
        "board_tps": _fig(pre_bounds["board_tps"], "tok/s", "board roof x weight reuse / weight bytes"),
        "design_tps": _fig(pre_bounds["design_tps"], "tok/s", "design stream bound x weight reuse / weight bytes"),
        "bound_tps": _fig(pre_bounds[tight], "tok/s", "the least of compute, board and design bounds"),
        "bound": {"compute_tps": "compute", "board_tps": "board roof", "design_tps": "design stream bound"}[tight],
    }
    for d, tps in ((dec, decode_tps), (pre, prefill_tps)):
        d["modelled_tps"] = _fig(tps, "tok/s", f"{PERF_MODEL_SOURCE} at {clk}")
        d["fraction"] = tps / d["bound_tps"]["value"] if tps else None
    dec["fraction_of_load_path"] = decode_tps / dec["load_path_tps"]["value"] if decode_tps else None
    return {"board": board.name, "config": cfg.name, "clock_mhz": f, "clock": label, "board_limit": bw["limit"],
            "figures": figs,
            "decode": dec, "prefill": pre}


def _g(v, fmt: str = ".3g") -> str:
    return "-" if v is None else format(v, fmt)


def render_roofline(reports: list[dict], title: str = "roofline per board"):
    """A :class:`rich.table.Table`: one decode and one prefill line per board (sources: :func:`roofline_sources`)."""
    from rich.table import Table

    t = Table(title=title)
    for col, just in (("board", "left"), ("phase", "left"), ("board roof GB/s", "right"), ("design GB/s", "right"),
                      ("design GMAC/s", "right"), ("bound tok/s: board", "right"), ("design", "right"),
                      ("compute", "right"), ("modelled tok/s", "right"), ("% of bound", "right"), ("limit", "left")):
        t.add_column(col, justify=just)
    for r in reports:
        fg, d, p = r["figures"], r["decode"], r["prefill"]
        roof = f"{fg['board_roof']['value']:.4g} ({'DRAM' if r['board_limit'] == 'dram' else 'PL ports'})"
        t.add_row(r["board"], "decode", roof, f"{fg['design_stream']['value']:.4g}", "-",
                  _g(d["board_tps"]["value"]), _g(d["design_tps"]["value"]), "-", _g(d["modelled_tps"]["value"]),
                  _g(d["fraction"] and 100 * d["fraction"], ".0f"), d["bound"])
        t.add_row("", "prefill", "", "", f"{fg['design_peak']['value']:.4g}", _g(p["board_tps"]["value"]),
                  _g(p["design_tps"]["value"]), _g(p["compute_tps"]["value"]), _g(p["modelled_tps"]["value"]),
                  _g(p["fraction"] and 100 * p["fraction"], ".0f"), p["bound"])
    return t


def roofline_sources(reports: list[dict]) -> list[str]:
    """Where every figure of :func:`render_roofline` comes from, one line each."""
    out = []
    for r in reports:
        fg, d, p = r["figures"], r["decode"], r["prefill"]
        out.append(f"{r['board']} ({r['clock']}):")
        for key, label in (("dram", "DRAM"), ("pl_ports", "PL ports"), ("board_roof", "board roof"),
                           ("design_stream", "design"), ("design_load", "LOAD path"), ("design_peak", "compute")):
            out.append(f"  {label} {fg[key]['value']:.4g} {fg[key]['unit']}: {fg[key]['source']}")
        out.append(f"  decode bytes/token {d['bytes_per_token']['value']:.4g}: {d['bytes_per_token']['source']}; "
                   f"LOAD-path bound {d['load_path_tps']['value']:.3g} tok/s"
                   + (f" ({100 * d['fraction_of_load_path']:.0f}% reached)" if d["fraction_of_load_path"] else ""))
        out.append(f"  prefill reuse {p['weight_reuse']['value']:.3g}: {p['weight_reuse']['source']}")
        out.append(f"  modelled: {d['modelled_tps']['source']}")
    return out
