"""What ``systolica bench`` measures: systolica on boards (modelled at the board clock) beside CPU/GPU baselines.

    systolica bench --model default --boards kv260,zcu104,pynq-z2 -n 8 --json out.json --plots plots/

The model is compiled once per board configuration; its programs are timed by the performance
model (:mod:`systolica.bench.accel_model`).  Each board row states its fit (from a measured synthesis
in the shared cache, :mod:`systolica.boards.fit_status`: yes / no / not measured), its clock (the board's
target, assumed) and its power basis (measured / datasheet / assumed); a row that does not fit, or whose
fit was never measured, is flagged as hypothetical.  ``--synth`` runs Yosys first for a board
configuration the cache lacks.  The baselines run the same model on the same prompt on this machine.  Output: a terminal table, optionally JSON and plots (roofline, tokens/s vs prompt
length and batch, energy per token).  RTL simulation of whole models is not offered: the RTL top
level executes LOAD/STORE/GEMM/NOP only (``hw/decode.py`` ``RTL_OPS``).  The command line itself is
:mod:`systolica.cli.bench`.
"""

from __future__ import annotations

from collections.abc import Sequence

from systolica.bench.errors import BenchError

__all__ = ["DEFAULT_PROMPT", "load_any_model", "prompt_ids", "run_bench"]

DEFAULT_PROMPT = "The capital of France is"


def load_any_model(spec: str):
    """``default``, a checkpoint path, or ``random:ARCH[:k=v,...]`` (a test model)."""
    from systolica.compiler.frontend import load_model

    return load_model(spec)


def prompt_ids(model, text: str, length: int | None = None) -> list[int]:
    """Token ids of ``text`` (bytes mod vocab without a tokenizer), cycled or cut to ``length`` if given."""
    tok = model.tokenizer
    ids = tok.encode(text) if tok is not None else [b % model.config.vocab_size for b in text.encode()]
    if not ids:
        raise BenchError("the prompt gives no tokens; pass a non-empty --prompt")
    if length is not None:
        ids = (ids * (length // len(ids) + 1))[:length]
    return ids


#: what a split-activations row trades (docs/quantization.md: SmolLM2's top-1 agreement with the float model)
SPLIT_NOTE = ("split activations: ~15-bit activations (int8 part + int8 residual), twice the GEMM rows; "
              "prefill does twice the MACs, decode reads the weights once for both")

#: where an int4 row's figures come from
NOTE = "performance model of the RTL's 4-bit weight datapath (hw/group_scaler.py; checked against RTL cycles on tiny)"


def run_bench(model, *, boards: list[str], prompt: list[int], n_tokens: int, baselines: list[str],
              gemm: str = "systolic", prompt_sweep: list[int] = (), batches: list[int] = (),
              gguf_path: str | None = None, threads: int | None = None, synth: bool = False,
              synth_timeout: float = 3600.0, progress=lambda s: None,
              weights: Sequence[str] = ("int8",), page: int | None = None,
              activations: Sequence[str] = ("plain",)) -> tuple[list, dict]:
    """Rows of the comparison and the sweeps behind the plots.

    ``weights``: one systolica row per board and matrix weight format, side by side (``("int8", "int4")``);
    an int4 row is timed by the performance model of the RTL's 4-bit datapath, and says so
    (``extra["weights_note"]``).  ``activations``: ``"plain"`` (one int8 exponent per row) and / or ``"split"``
    (``compile_model(act_split=True)``: the int8 part and the int8 residual, two GEMM rows a token row), one row
    per board, format and mode.  The sweeps are timed for the first format and mode only.

    ``synth``: run Yosys for a board configuration without a current cached synthesis (slow);
    otherwise such a row's fit is "not measured".

    ``page``: the KV-cache page of every board's compile; default None, the compiler's choice for each board
    (:func:`systolica.compiler.kv_page.choose_page`); ``row.extra["kv_page"]`` says which it was."""
    from systolica.bench.accel_model import AccelTimer, board_spec, model_on_board, sweep_breakdowns
    from systolica.bench.baselines import run_baselines, run_torch
    from systolica.compiler.compile import compile_model
    from systolica.compiler.kv_page import page_and_context
    from systolica.sim.perf_costs import PerfParams
    from systolica.sim.roofline import board_params

    need = max([len(prompt) + n_tokens, *prompt_sweep]) + 2
    rows, sweeps = [], {"prompt": {}, "batch": {}}
    for name, fmt, act in [(b, w, a) for b in boards for w in weights for a in activations]:
        spec = board_spec(name)
        _, max_seq = page_and_context(spec.config, model.config, need, page)  # whole pages of the page it gets
        split = act == "split"
        progress(f"compiling for {name} ({fmt} weights{', split activations' if split else ''})")
        art = compile_model(model, spec.config, page=page, max_seq=max_seq, prefill_chunk=16, weights=fmt,
                            act_split=split)
        progress(f"timing {name}")
        row = model_on_board(art, spec, prompt, n_tokens, gemm=gemm)
        row.extra["prefill_rows"] = art.rows("prefill") if "prefill" in art.programs else 1
        row.extra["prefill_nohead_rows"] = art.rows("prefill_nohead") if "prefill_nohead" in art.programs else None
        row.extra["weights"] = fmt
        row.extra["activations"] = act
        row.extra["kv_page"] = art.manifest["kv_page"]
        row.extra["weight_bytes_per_token"] = art.manifest["stats"]["decode"]["weight_bytes"]  # counted, program
        row.extra["stream_bytes_by_format"] = art.manifest["stats"]["decode"].get("stream_bytes_by_format", {})
        if fmt != "int8":
            row.name = f"{row.name}, {fmt} weights"
            row.extra["weights_note"] = f"{fmt}: {NOTE}"
            rep = row.extra.get("roofline_report")
            if rep:  # its modelled figures are not RTL-validated: say so where they are printed
                rep["board"] = f"{rep['board']} {fmt}"
                for part in ("decode", "prefill"):
                    rep[part]["modelled_tps"]["source"] = row.extra["weights_note"]
        if split:
            row.name = f"{row.name}, split activations"
            row.extra["activations_note"] = SPLIT_NOTE
            rep = row.extra.get("roofline_report")
            if rep:  # its tables' board column says which row it is
                rep["board"] = f"{rep['board']} split"
        _attach_fit(row, name, spec.config, synth=synth, timeout=synth_timeout, progress=progress)
        rows.append(row)
        if (fmt, act) != (weights[0], activations[0]):
            continue
        timer = AccelTimer(art, board_params(spec.config, dram_gbps=spec.dram_gbps, base=PerfParams(gemm=gemm)))
        f = spec.clock_mhz * 1e6
        pts = []
        for n in prompt_sweep:
            ids = (prompt * (n // len(prompt) + 1))[:n]
            parts = sweep_breakdowns(timer, ids)
            row.extra["cycle_breakdown"].update(parts)
            pts.append({"prompt_tokens": n, "ttft_s": parts[f"prefill@{n}"]["cycles"] / f,
                        "decode_tokens_per_s": f / parts[f"decode@{n}"]["cycles"],
                        "array_utilization": parts[f"prefill@{n}"]["array_utilization"],
                        "x_compute_bound": parts[f"prefill@{n}"]["x_compute_bound"],
                        "decode_attention_share": parts[f"decode@{n}"]["shares"]["attention"],
                        "decode_attention_adds": parts[f"decode@{n}"]["attention_adds"]})
        if pts:
            sweeps["prompt"][row.name] = pts
        if batches:  # the batched decode step of B sequences, timed by the performance model
            from systolica.bench.batch_sweep import systolica_batch_points, with_costs

            pts = systolica_batch_points(model, spec, prompt, batches, page=page, max_seq=max_seq, gemm=gemm,
                                         single_tps=row.decode_tokens_per_s, progress=progress, act_split=split)
            sweeps["batch"][row.name] = with_costs(pts, row.power_w, row.usd_per_hour)
    progress("baselines")
    rows += run_baselines(model, prompt, n_tokens, baselines, gguf_path=gguf_path, threads=threads)
    for dev in [d for d in ("cpu", "cuda") if f"torch-{d}" in baselines]:
        ran = next((r for r in rows if r.name == f"PyTorch {dev}" and r.skipped is None), None)
        if ran is None:
            continue
        if batches:
            from systolica.bench.batch_sweep import with_costs

            progress(f"PyTorch {dev} batch sweep")
            pts = []
            for b in batches:
                r = run_torch(model, prompt, max(n_tokens, 3), dev, batch=b, threads=threads)
                pts.append({"batch": b, "decode_tokens_per_s": r.decode_tokens_per_s, "fits": True,
                            "source": "measured"})
            sweeps["batch"][ran.name] = with_costs(pts, ran.power_w, ran.usd_per_hour)
        if prompt_sweep:
            progress(f"PyTorch {dev} prompt sweep")
            pts = []
            for n in prompt_sweep:
                r = run_torch(model, (prompt * (n // len(prompt) + 1))[:n], 3, dev, threads=threads)
                pts.append({"prompt_tokens": n, "ttft_s": r.ttft_s, "decode_tokens_per_s": r.decode_tokens_per_s})
            sweeps["prompt"][ran.name] = pts
    if batches and not any(r.name == "PyTorch cuda" and r.skipped is None for r in rows):
        from systolica.bench.batch_sweep import gpu_projection_points

        proj = gpu_projection_points(model, "H100", batches)
        sweeps["batch"]["H100 (projected: datasheet roofline bound, no CUDA device here)"] = proj["points"]
    if batches:
        from systolica.bench.batch_sweep import METRICS, crossovers

        sweeps["batch_crossovers"] = [x for m in METRICS for x in crossovers(sweeps["batch"], m)]
    return rows, sweeps


def _attach_fit(row, board_name: str, cfg, *, synth: bool, timeout: float, progress) -> None:
    """Fit (measured or not), clock and power basis of a board row, in ``row.extra`` and its sources."""
    from systolica.boards.board import load_board
    from systolica.boards.fit_status import NOT_MEASURED, clock_basis, fit_status, power_basis

    board = load_board(board_name)
    st = fit_status(cfg, board)
    if synth and st.state == NOT_MEASURED:
        from systolica.boards.synth_cache import cache_dir, synthesize

        progress(f"Yosys synthesis of {cfg.name} for {board.name} (slow)")
        rec = synthesize(cfg, board, workdir=cache_dir() / "work" / f"{board.family}-{cfg.hash_hex()[:12]}",
                         timeout=timeout)
        st = fit_status(cfg, board, record=rec)
    power = power_basis(board)
    row.extra["fit"] = st.to_dict()
    row.extra["fit_label"] = st.label()
    row.extra["clock"] = clock_basis(cfg, st.record if st.measured else None, board)
    row.extra["power"] = power
    row.power_source = f"{power['basis']}: {power['source']}"
