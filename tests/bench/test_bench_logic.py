"""systolica bench on a tiny model: costs, ratios side by side, JSON structure, plots. No timing asserts."""

from __future__ import annotations

import json

import pytest

from systolica.bench.baselines import BaselineResult
from systolica.bench.costs import CostInputs, board_usd_per_hour, load_costs, tokens_per_joule, usd_per_mtok
from systolica.bench.report import comparison, reference_row, render_table, write_json
from systolica.testmodels import random_model

MODEL_SPEC = "random:llama:dim=32,n_layers=2,n_heads=4,n_kv_heads=2,vocab=128"


def test_cost_arithmetic_and_inputs_have_sources():
    c = load_costs()
    assert usd_per_mtok(100.0, 3.6) == pytest.approx(3.6 / (100 * 3600) * 1e6)
    assert tokens_per_joule(50.0, 10.0) == 5.0 and tokens_per_joule(None, 10.0) is None
    per_h = board_usd_per_hour(876.0, 10.0, c)
    assert per_h == pytest.approx(876.0 / (c.amortization_years.value * 8760) + 0.01 * c.electricity.value)
    for f in (c.electricity, c.amortization_years, c.cpu_core_rent, c.cpu_core_power, *c.gpu_rent.values(),
              *c.gpu_power.values()):
        assert f.source and f.value >= 0
    assert c.gpu_rent_for("NVIDIA H200 NVL") is c.gpu_rent["H200"]
    assert c.gpu_power_for("Some Unknown GPU") is c.gpu_power["default"]


def test_bad_cost_inputs_name_the_field():
    from systolica.bench.costs import COSTS_FILE

    good = json.loads(COSTS_FILE.read_text())
    bad = dict(good, electricity_usd_per_kwh={"value": "cheap"})
    with pytest.raises(ValueError, match="electricity_usd_per_kwh"):
        CostInputs(bad)
    missing = {k: v for k, v in good.items() if k != "amortization_years"}
    with pytest.raises(ValueError, match="amortization_years"):
        CostInputs(missing)


def _rows():
    ref = BaselineResult("PyTorch cpu", "cpu", ttft_s=0.2, decode_tokens_per_s=10.0, power_w=20.0, usd_per_hour=0.1)
    acc = BaselineResult("systolica kv260 (modelled)", "kv260", ttft_s=0.05, decode_tokens_per_s=25.0, power_w=5.0,
                         usd_per_hour=0.02, extra={"roofline": {}, "decode_fraction_of_bound": 0.9})
    skip = BaselineResult("PyTorch cuda", "cuda", skipped="no CUDA device")
    return [acc, ref, skip]


def test_ratios_are_taken_against_pytorch_cpu_side_by_side():
    rows = _rows()
    assert reference_row(rows).name == "PyTorch cpu"
    d = {r["name"]: r for r in comparison(rows)}
    acc = d["systolica kv260 (modelled)"]
    assert acc["decode_speedup_vs_ref"] == pytest.approx(2.5)
    assert acc["ttft_speedup_vs_ref"] == pytest.approx(4.0)
    assert acc["tokens_per_joule"] == pytest.approx(5.0)
    assert acc["tokens_per_joule_vs_ref"] == pytest.approx(5.0 / 0.5)
    assert acc["usd_per_mtok"] == pytest.approx(0.02 / (25 * 3600) * 1e6)
    assert d["PyTorch cuda"]["decode_speedup_vs_ref"] is None and d["PyTorch cuda"]["skipped"]
    assert reference_row([rows[0], rows[2]]).name == rows[0].name  # no PyTorch CPU: the first row that ran
    assert render_table(rows).row_count == 3


def test_json_structure(tmp_path):
    doc = write_json(tmp_path / "b.json", _rows(), {"model": "x"}, {"prompt": {}, "batch": {}})
    back = json.loads((tmp_path / "b.json").read_text())
    assert back["schema"] == doc["schema"] == "systolica-bench/1"
    assert [r["name"] for r in back["rows"]] == [r.name for r in _rows()]
    assert {"ttft_s", "decode_tokens_per_s", "tokens_per_joule", "usd_per_mtok", "power_source", "cost_source",
            "decode_speedup_vs_ref", "skipped", "extra"} <= set(back["rows"][0])


@pytest.fixture(scope="module")
def bench_run():
    from systolica.bench.compare import load_any_model, prompt_ids, run_bench

    model = load_any_model(MODEL_SPEC)
    prompt = prompt_ids(model, "hello there", 6)
    rows, sweeps = run_bench(model, boards=["pynq-z2"], prompt=prompt, n_tokens=3, baselines=["numpy", "torch-cpu"],
                             prompt_sweep=[4, 8], batches=[1, 2], threads=1)
    return model, prompt, rows, sweeps


def test_bench_rows_on_a_tiny_model(bench_run):
    model, prompt, rows, sweeps = bench_run
    names = [r.name for r in rows]
    assert names[:2] == ["systolica pynq-z2 (modelled)", "numpy float32 reference"]
    acc, ref_np = rows[0], rows[1]
    ex = acc.extra
    assert acc.ttft_s > 0 and acc.decode_tokens_per_s > 0 and acc.power_w > 0 and acc.usd_per_hour > 0
    assert 0 < ex["decode_fraction_of_bound"] <= 1.0  # the model never beats the DRAM roof
    assert 0 < ex["prefill_fraction_of_bound"] <= 1.0  # nor the array's peak
    assert ex["decode_cycles_per_token"] == pytest.approx(ex["clock_mhz"] * 1e6 / acc.decode_tokens_per_s)
    roof = ex["roofline_report"]  # the board's and the design's roofs beside the modelled figures
    assert roof["board"] == "pynq-z2" and roof["figures"]["board_roof"]["value"] == pytest.approx(1.575)
    assert roof["decode"]["modelled_tps"]["value"] == acc.decode_tokens_per_s
    assert roof["prefill"]["modelled_tps"]["value"] == pytest.approx(ex["prefill_tokens_per_s"])
    assert 0 < roof["decode"]["fraction"] <= 1.0 and 0 < roof["prefill"]["fraction"] <= 1.0
    # the bench table's "% of bound" is the roofline report's: min(board roof, every port's stream), not the LOAD path
    assert roof["decode"]["fraction"] == pytest.approx(ex["decode_fraction_of_bound"], rel=1e-6)
    assert roof["decode"]["fraction_of_load_path"] > roof["decode"]["fraction"]
    assert len(ref_np.tokens) == 3 and ref_np.decode_tokens_per_s > 0
    torch_row = rows[2]
    if torch_row.skipped is None:  # the same float model in torch and numpy: the same greedy tokens
        assert torch_row.tokens == ref_np.tokens
        assert [p["batch"] for p in sweeps["batch"]["PyTorch cpu"]] == [1, 2]
    assert [p["prompt_tokens"] for p in sweeps["prompt"]["systolica pynq-z2 (modelled)"]] == [4, 8]
    ttfts = [p["ttft_s"] for p in sweeps["prompt"]["systolica pynq-z2 (modelled)"]]
    assert ttfts[1] > ttfts[0]  # a longer prompt takes longer to prefill


def test_plots_are_written(bench_run, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e .[test])")
    from systolica.bench.plots import plot_all

    _, _, rows, sweeps = bench_run
    doc = json.loads(json.dumps(write_json(tmp_path / "b.json", rows, {}, sweeps), default=str))
    files = plot_all(doc, tmp_path / "plots")
    assert {f.name for f in files} == {"roofline.png", "tokens_vs_prompt.png", "tokens_vs_batch.png",
                                       "energy_per_token.png"}
    for f in files:
        assert f.stat().st_size > 1000 and f.read_bytes()[:4] == b"\x89PNG"


def test_bench_command_line(tmp_path, capsys):
    from systolica.cli import main

    out = tmp_path / "bench.json"
    rc = main(["bench", "--model", MODEL_SPEC, "--boards", "pynq-z2", "-n", "2", "--baselines", "numpy,llama.cpp",
               "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "roofline per board" in text and "1.575 (DRAM)" in text
    assert "pynq-z2.toml dram_efficiency = 0.75 (datasheet" in text  # every figure with its source
    doc = json.loads(out.read_text())
    assert doc["meta"]["tokens"] == 2 and len(doc["rows"]) == 3
    assert doc["rows"][2]["skipped"]  # llama.cpp: not a GGUF model (or not installed)
    assert main(["bench", "--model", MODEL_SPEC, "--boards", "no-such-board", "--baselines", ""]) == 2


def test_prompt_ids_without_a_tokenizer():
    from systolica.bench.compare import prompt_ids

    m = random_model("llama", dim=32, n_layers=1, n_heads=4, vocab=50)
    assert prompt_ids(m, "ab") == [ord("a") % 50, ord("b") % 50]
    assert len(prompt_ids(m, "ab", 5)) == 5
    with pytest.raises(ValueError, match="prompt"):
        prompt_ids(m, "")


@pytest.mark.gpu
def test_torch_cuda_gives_the_cpu_tokens():
    from systolica.bench.baselines import run_torch

    m = random_model("llama", dim=32, n_layers=2, n_heads=4, vocab=64, seed=3)
    cpu = run_torch(m, [1, 2, 3], 4, "cpu")
    gpu = run_torch(m, [1, 2, 3], 4, "cuda")
    assert gpu.skipped is None and gpu.decode_tokens_per_s > 0 and gpu.power_w > 0
    assert gpu.tokens == cpu.tokens  # float16 on a 64-token vocabulary: the same greedy choices


@pytest.mark.slow
def test_llamacpp_on_the_default_model():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from systolica.bench.baselines import run_llamacpp
    from systolica.compiler.model_zoo import locate_default_model

    path = locate_default_model()
    if path is None:
        pytest.skip("default model not fetched: python -m systolica.compiler.model_zoo fetch")
    r = run_llamacpp(str(path), [1, 504, 3458], 3)
    assert r.skipped is None and len(r.tokens) == 3 and r.decode_tokens_per_s > 0


def test_board_rows_state_fit_clock_and_power(bench_run, tmp_path):
    """No synthesis cached: the row is flagged 'fit not measured', greyed, and its clock and power say their basis."""
    _, _, rows, sweeps = bench_run
    ex = rows[0].extra
    assert ex["fit"]["state"] == "not measured" and ex["fit"]["fits"] is None and ex["fit_label"] == "not measured"
    assert ex["clock"] == {"mhz": 100.0, "target_mhz": 100.0, "measured_fmax_mhz": None, "basis": "assumed",
                           "source": "the board's target clock; no Vivado timing", "ecp5_proxy": None,
                           "label": "clock: assumed 100 MHz (no Vivado timing)"}
    assert ex["power"]["basis"] == "assumed" and rows[0].power_source.startswith("assumed: pynq-z2.toml power_w")
    from rich.console import Console

    con = Console(width=250, record=True)
    con.print(render_table(rows))
    text = con.export_text()
    assert "HYPOTHETICAL: fit not measured" in text and "not measured" in text
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e .[test])")
    from systolica.bench.plots import plot_energy

    doc = json.loads(json.dumps(write_json(tmp_path / "b.json", rows, {}, sweeps), default=str))
    assert plot_energy(doc, tmp_path / "e.png").stat().st_size > 1000


def test_a_measured_misfit_is_labelled(tmp_path, monkeypatch):
    """A cached synthesis that overflows the board: the row says 'no (LUT ...)' and stays hypothetical."""
    from systolica.bench.compare import _attach_fit
    from systolica.boards.board import Resources, load_board
    from systolica.boards.synth_cache import store

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    b = load_board("kv260")
    store(b.config, "xcup", True, Resources(lut=249449, ff=87767, dsp=418, bram=0), seconds=1620.0,
          memories=[{"name": "gemm.acc_mem", "kind": "ff", "cell": "flip-flops", "bits": 1048576}])
    row = BaselineResult("systolica kv260 (modelled)", "kv260", ttft_s=0.1, decode_tokens_per_s=20.0, power_w=7.9,
                         usd_per_hour=0.01, extra={"roofline": {}})
    _attach_fit(row, "kv260", b.config, synth=False, timeout=1, progress=lambda s: None)
    fit = row.extra["fit"]
    assert fit["state"] == "no" and fit["tightest"] == "LUT 213%" and fit["buffers_in_ff"] == ["gemm.acc_mem"]
    assert fit["synth"]["seconds"] == 1620.0 and row.extra["power"]["basis"] == "datasheet"
    d = {r["name"]: r for r in comparison([row])}
    assert d[row.name]["extra"]["fit_label"] == "no (LUT 213%)"


def test_hypothetical_rows_are_never_the_reference_and_synth_fills_the_fit(tmp_path, monkeypatch):
    from systolica.bench.compare import _attach_fit
    from systolica.boards import synth_cache
    from systolica.boards.board import Resources

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    acc, ref, _ = _rows()
    acc.extra["fit"] = {"state": "not measured"}
    assert reference_row([acc, ref]).name == "PyTorch cpu" and reference_row([acc]) is None
    monkeypatch.setattr(synth_cache, "synthesize", lambda cfg, board, **k: synth_cache.store(
        cfg, board.family, False, Resources(lut=1000, ff=2000, dsp=70, bram=50), seconds=9.0))
    from systolica.boards.board import load_board

    row = BaselineResult("systolica pynq-z2 (modelled)", "pynq-z2", decode_tokens_per_s=5.0, extra={"roofline": {}})
    _attach_fit(row, "pynq-z2", load_board("pynq-z2").config, synth=True, timeout=1, progress=lambda s: None)
    assert row.extra["fit"]["state"] == "yes" and row.extra["fit_label"] == "yes (BRAM 36%)"
    assert reference_row([row]) is row


def test_golden_host_speed_row_decodes_what_the_runtime_decodes():
    """The golden simulator's own host-speed row: the same greedy tokens as a plain golden Runtime run."""
    from systolica.bench.baselines import run_golden
    from systolica.compiler.compile import compile_model
    from systolica.config import preset
    from systolica.driver.device import open_device
    from systolica.driver.runtime import Runtime

    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=64, seed=4,
                         max_seq=32)
    prompt, n = [3, 9, 27, 17], 4
    row = run_golden(model, prompt, n)
    assert row.skipped is None and row.name == "golden simulator (host)" and len(row.tokens) == n
    assert row.ttft_s > 0 and row.decode_tokens_per_s > 0 and row.usd_per_hour > 0
    cfg = preset("default")
    art = compile_model(model, cfg, page=16, max_seq=16, prefill_chunk=16)
    rt = Runtime(art, open_device("golden", cfg, dram_bytes=art.dram_bytes + 8192))
    assert [s.token for s in rt.generate(prompt, n, stop=[])] == row.tokens
