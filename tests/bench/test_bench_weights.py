"""``systolica bench --weights int8,int4``: one row per format per board, the int4 row labelled as the performance
model of the RTL's 4-bit datapath, reading fewer weight bytes a token and decoding faster."""

from __future__ import annotations

from systolica.bench.compare import prompt_ids, run_bench
from systolica.testmodels import random_model


def test_int8_and_int4_rows_side_by_side():
    # big enough that the weight streams bound decode (at dim 64 the line-op chains do: pynq-z2 reads int8 weights
    # ahead of its streams two beats a cycle, config.wstream_pairs, and int4 was 0.93x int8 there)
    model = random_model("llama", dim=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=768, vocab=128, seed=3,
                         max_seq=64, tied=False)
    prompt = prompt_ids(model, "hello there", 6)
    rows, _ = run_bench(model, boards=["pynq-z2"], prompt=prompt, n_tokens=3, baselines=[], weights=("int8", "int4"))
    r8, r4 = rows
    assert r8.extra["weights"] == "int8" and r4.extra["weights"] == "int4"
    assert r4.name.endswith("int4 weights") and "4-bit weight datapath" in r4.extra["weights_note"]
    rep = r4.extra.get("roofline_report")
    assert rep is None or "4-bit weight datapath" in rep["decode"]["modelled_tps"]["source"]
    assert set(r4.extra["stream_bytes_by_format"]) == {"Q4_1", "INT8"}  # the LM head stays int8
    assert r4.extra["weight_bytes_per_token"] < 0.8 * r8.extra["weight_bytes_per_token"]
    assert r4.decode_tokens_per_s > 1.1 * r8.decode_tokens_per_s
