"""``systolica bench --activations plain,split``: one row per mode per board; the split row's prefill does twice
the GEMM rows (twice the MACs), and it says what it trades."""

from __future__ import annotations

import pytest

from systolica.bench.compare import prompt_ids, run_bench
from systolica.cli import main as cli_main
from systolica.testmodels import random_model


def test_plain_and_split_rows_side_by_side():
    model = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab=128, seed=3,
                         max_seq=64, tied=False)
    prompt = prompt_ids(model, "hello there", 6)
    rows, _ = run_bench(model, boards=["pynq-z2"], prompt=prompt, n_tokens=3, baselines=[],
                        activations=("plain", "split"))
    plain, split = rows
    assert plain.extra["activations"] == "plain" and split.extra["activations"] == "split"
    assert split.name.endswith("split activations") and "twice the GEMM rows" in split.extra["activations_note"]
    assert not plain.name.endswith("split activations")
    pre_p, pre_s = (r.extra["cycle_breakdown"]["prefill"] for r in (plain, split))
    assert 1.9 < pre_s["macs"] / pre_p["macs"] < 2.1  # the int8 part and the residual: two GEMM rows a token
    assert split.ttft_s > 1.2 * plain.ttft_s
    rep = split.extra.get("roofline_report")
    assert rep is None or rep["board"].endswith("split")


@pytest.mark.parametrize("bad", ["float", "plain,plain", ""])
def test_bad_activations_is_a_usage_error(bad, capsys):
    rc = cli_main(["bench", "--model", "random:llama", "--boards", "pynq-z2", "--baselines", "",
                   "--activations", bad])
    assert rc != 0
    assert "--activations" in capsys.readouterr().err
