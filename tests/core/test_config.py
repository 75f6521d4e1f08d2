"""AccelConfig: validation messages, TOML round trip, presets and the stable hash."""

from __future__ import annotations

import pytest

from systolica.config import PRESETS, AccelConfig, ConfigError, load_config, preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_toml(name, tmp_path):
    cfg = preset(name)
    path = tmp_path / f"{name}.toml"
    cfg.save(path)
    back = AccelConfig.load(path)
    assert back == cfg
    assert back.hash32() == cfg.hash32()


def test_hash_ignores_the_name_but_not_the_shape():
    a = AccelConfig(name="a")
    assert AccelConfig(name="b").hash_hex() == a.hash_hex()
    assert AccelConfig(name="a", cols=16).hash_hex() != a.hash_hex()
    assert AccelConfig(name="a", clock_mhz=150.0).hash32() != a.hash32()


def test_hash_is_stable_across_runs():
    # The ID register of built bitstreams carries this value: changing how the hash
    # is computed orphans every bitstream and compiled artifact in the field.
    assert preset("default").hash_hex() == AccelConfig().hash_hex()
    assert 0 <= preset("tiny").hash32() < 2**32
    assert len({p.hash32() for p in PRESETS.values()}) == len(PRESETS)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"rows": 1}, "rows=1 must be in 2..64"),
        ({"cols": 100}, "cols=100 must be in 2..64"),
        ({"dma_bits": 48}, "dma_bits=48"),
        ({"dma_ports": 0}, "dma_ports=0"),
        ({"max_burst": 24}, "max_burst=24"),
        ({"queue_depth": 3}, "queue_depth=3"),
        ({"spad_kib": 100000}, "address fields are 16 bits"),
        ({"acc_kib": 0}, "acc_kib=0 must be positive"),
        ({"in_bits": 4}, "only int8"),
        ({"clock_mhz": -5.0}, "clock_mhz=-5.0"),
        ({"dram_bytes": 3 << 20}, "dram_bytes="),
        ({"rows": "8"}, "rows='8' must be int"),
    ],
)
def test_validation_names_the_field_and_the_reason(changes, words):
    with pytest.raises(ConfigError) as e:
        AccelConfig(**changes)
    assert words in str(e.value)


def test_toml_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[accel]\nrows = 8\nwidth = 3\n")
    with pytest.raises(ConfigError, match="unknown field.*width"):
        AccelConfig.load(bad)
    bad.write_text("[accel\nrows = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        AccelConfig.load(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        AccelConfig.load(tmp_path / "missing.toml")


def test_toml_can_start_from_a_preset(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[accel]\npreset = "tiny"\nname = "mine"\ncols = 8\n')
    cfg = load_config(p)
    assert cfg.cols == 8 and cfg.rows == preset("tiny").rows and cfg.name == "mine"


def test_load_config_resolves_names_and_rejects_unknown():
    assert load_config(None) == preset("default")
    assert load_config("tiny") == preset("tiny")
    with pytest.raises(ConfigError, match="neither a preset"):
        load_config("nonexistent-preset")


def test_derived_sizes():
    cfg = AccelConfig(cols=8, spad_kib=64, acc_kib=32, dma_bits=128, dma_ports=2)
    assert cfg.spad_lines == 64 * 1024 // 8
    assert cfg.acc_lines == 32 * 1024 // 32
    assert cfg.peak_dram_bytes_per_cycle == 32


def test_line_lanes_default_keeps_the_hash_and_validates():
    """line_lanes 0 (and = cols) is the full-width line datapath: the hardware, and the hash, of before the field."""
    base = AccelConfig(cols=8)
    assert base.line_width == 8 and base.line_beats == 1
    assert base.replace(line_lanes=8).hash32() == base.hash32()
    narrow = base.replace(line_lanes=2)
    assert narrow.line_width == 2 and narrow.line_beats == 4 and narrow.hash32() != base.hash32()
    assert AccelConfig.from_toml(narrow.to_toml()) == narrow
    for bad in (1, 3, 6, 16, -2):
        with pytest.raises(ConfigError, match=f"line_lanes={bad} must be 0"):
            base.replace(line_lanes=bad)


def test_reshaped_keeps_the_line_beats():
    base = AccelConfig(rows=16, cols=16, line_lanes=4)  # 4 beats a line
    assert [(base.reshaped(n, n).line_width, base.reshaped(n, n).line_beats) for n in (8, 16, 32)] == \
        [(2, 4), (4, 4), (8, 4)]
    assert base.reshaped(4, 4).line_lanes == 2  # never below 2 lanes (ROPE pairs them)
    assert AccelConfig(rows=8, cols=8).reshaped(16, 16).line_lanes == 0  # full width stays full width


def test_nonlinear_lanes_default_keeps_the_hash_and_validates():
    """nonlinear_lanes 0 (and = line_width): the activation, norm and softmax units as wide as the line datapath."""
    base = AccelConfig(cols=8, line_lanes=4)
    assert base.nonlinear_width == 4 and base.nonlinear_beats == 2
    assert base.replace(nonlinear_lanes=4).hash32() == base.hash32()
    narrow = base.replace(nonlinear_lanes=1)
    assert narrow.nonlinear_width == 1 and narrow.nonlinear_beats == 8 and narrow.line_beats == 2
    assert narrow.hash32() != base.hash32()
    assert AccelConfig.from_toml(narrow.to_toml()) == narrow
    for bad in (3, 8, -1):
        with pytest.raises(ConfigError, match=f"nonlinear_lanes={bad} must be 0"):
            base.replace(nonlinear_lanes=bad)


def test_reshaped_keeps_the_nonlinear_share():
    base = AccelConfig(rows=16, cols=16, line_lanes=4, nonlinear_lanes=2)  # half the line datapath's lanes
    assert [base.reshaped(n, n).nonlinear_width for n in (8, 16, 32)] == [1, 2, 4]
    assert AccelConfig(rows=8, cols=8, line_lanes=2).reshaped(16, 16).nonlinear_lanes == 0


def test_rowpass_lanes_default_keeps_the_hash_validates_and_reshapes():
    """rowpass_lanes 0 (and = the activation's width): the norm and softmax units as wide as the activation unit."""
    base = AccelConfig(cols=16, line_lanes=16, nonlinear_lanes=4)
    assert base.rowpass_width == 4 and base.rowpass_beats == 4
    assert base.replace(rowpass_lanes=4).hash32() == base.hash32()
    wide = base.replace(rowpass_lanes=8)
    assert (wide.rowpass_width, wide.rowpass_beats, wide.nonlinear_beats, wide.line_beats) == (8, 2, 4, 1)
    assert wide.hash32() != base.hash32()
    assert AccelConfig.from_toml(wide.to_toml()) == wide
    for bad in (3, 32, -1):
        with pytest.raises(ConfigError, match=f"rowpass_lanes={bad} must be 0"):
            base.replace(rowpass_lanes=bad)
    assert [wide.reshaped(n, n).rowpass_width for n in (8, 16, 32)] == [4, 8, 16]  # half the line datapath's lanes
    assert [wide.reshaped(n, n).nonlinear_width for n in (8, 16, 32)] == [2, 4, 8]


def test_attn_rows_validates_keeps_the_default_hash_and_reshapes():
    """attn_rows: query rows through a KV tile together; each needs a lane multiplier of the state-line datapath."""
    base = AccelConfig(cols=8, line_lanes=4)
    assert base.attn_rows == 1 and base.replace(attn_rows=1).hash32() == base.hash32()
    three = base.replace(attn_rows=3)
    assert three.hash32() != base.hash32() and AccelConfig.from_toml(three.to_toml()) == three
    for bad in (0, 5, 9):  # 5 > line_width 4
        with pytest.raises(ConfigError, match=f"attn_rows={bad} must be in 1..min"):
            base.replace(attn_rows=bad)
    assert base.replace(attn_rows=4).reshaped(4, 4).attn_rows == 2  # a 2-lane line datapath holds 2 rows
    assert three.reshaped(16, 16).attn_rows == 3


def test_attn_pv_shared_validates_and_keeps_the_default_hash():
    """attn_pv_shared: the rows of an attention job take turns on one set of p * v lanes."""
    base = AccelConfig(cols=8, line_lanes=4, attn_rows=3)
    assert base.attn_pv_shared == 0 and base.replace(attn_pv_shared=0).hash32() == base.hash32()
    shared = base.replace(attn_pv_shared=1)
    assert shared.hash32() != base.hash32() and AccelConfig.from_toml(shared.to_toml()) == shared
    for bad in (2, -1):
        with pytest.raises(ConfigError, match=f"attn_pv_shared={bad} must be 0"):
            base.replace(attn_pv_shared=bad)


def test_attn_pv_sets_validates_and_keeps_the_default_hash():
    """attn_pv_sets: the sets of shared p * v lanes (1 keeps the hash of before the field)."""
    shared = AccelConfig(cols=8, line_lanes=4, attn_rows=3, attn_pv_shared=1)
    assert shared.attn_pv_sets == 1 and shared.replace(attn_pv_sets=1).hash32() == shared.hash32()
    two = shared.replace(attn_pv_sets=2)
    assert two.hash32() != shared.hash32() and AccelConfig.from_toml(two.to_toml()) == two
    for cfg, bad in ((shared, 0), (shared, 4), (shared.replace(attn_pv_shared=0), 2)):
        with pytest.raises(ConfigError, match=f"attn_pv_sets={bad} must be 1"):
            cfg.replace(attn_pv_sets=bad)
    assert two.replace(line_lanes=2, attn_rows=2).attn_pv_sets == 2
    three = two.replace(line_lanes=0, attn_pv_sets=3)
    assert three.reshaped(16, 16).attn_pv_sets == 3 and three.reshaped(2, 2).attn_pv_sets == 2  # at most attn_rows


def test_softmax_unit_validates_and_keeps_the_default_hash():
    base = AccelConfig(cols=8)
    assert base.softmax_unit == 1 and base.replace(softmax_unit=1).hash32() == base.hash32()
    none = base.replace(softmax_unit=0)
    assert none.hash32() != base.hash32() and AccelConfig.from_toml(none.to_toml()) == none
    with pytest.raises(ConfigError, match="softmax_unit=2 must be 0"):
        base.replace(softmax_unit=2)


def test_macs_per_dsp_validates_and_keeps_the_default_hash():
    base = AccelConfig(cols=8)
    assert base.replace(macs_per_dsp=1).hash32() == base.hash32()
    packed = base.replace(macs_per_dsp=2)
    assert packed.hash32() != base.hash32() and AccelConfig.from_toml(packed.to_toml()) == packed
    for bad in (0, 3, 4):
        with pytest.raises(ConfigError, match=f"macs_per_dsp={bad} must be 1"):
            base.replace(macs_per_dsp=bad)


def test_load_ports_validates_and_keeps_the_default_hash():
    """LOAD striped over every read port (config.load_ports) or through gmem0 alone (1: the hash of before)."""
    base = AccelConfig(cols=8, dma_ports=4)
    assert base.load_ports == 1 and base.replace(load_ports=1).hash32() == base.hash32()
    striped = base.replace(load_ports=4)
    assert striped.hash32() != base.hash32() and AccelConfig.from_toml(striped.to_toml()) == striped
    for bad in (2, 0, 5):
        with pytest.raises(ConfigError, match=f"load_ports={bad} must be 1"):
            base.replace(load_ports=bad)


def test_wstream_ahead_validates_keeps_the_default_hash_and_reshapes():
    """wstream_ahead: the weight ports' line FIFO when they read ahead of their GEMM_STREAM, at least two bursts."""
    base = AccelConfig(cols=16, dma_bits=128, max_burst=64)
    assert base.burst_lines == 64 and base.replace(wstream_ahead=0).hash32() == base.hash32()
    ahead = base.replace(wstream_ahead=128)
    assert ahead.hash32() != base.hash32() and AccelConfig.from_toml(ahead.to_toml()) == ahead
    for bad in (64, 96, -1):  # one burst; not a power of two; negative
        with pytest.raises(ConfigError, match=f"wstream_ahead={bad} must be 0"):
            base.replace(wstream_ahead=bad)
    assert ahead.reshaped(32, 32).wstream_ahead == 128  # 32-byte lines: bursts of 32 lines
    assert AccelConfig(cols=4, dma_bits=32, max_burst=16, wstream_ahead=32).reshaped(8, 8).wstream_ahead == 32


def test_wstream_pairs_validates_keeps_the_default_hash_and_reshapes():
    """wstream_pairs: the array takes two weight beats a cycle from the ports' even and odd FIFOs; it needs the
    ports to read ahead (wstream_ahead) and the 4-bit datapath's array of 2 x dma_ports columns."""
    base = AccelConfig(cols=16, dma_bits=128, max_burst=64, dma_ports=4, wstream_ahead=1024)
    assert base.replace(wstream_pairs=0).hash32() == base.hash32()
    pairs = base.replace(wstream_pairs=1)
    assert pairs.hash32() != base.hash32() and AccelConfig.from_toml(pairs.to_toml()) == pairs
    with pytest.raises(ConfigError, match="wstream_pairs=2 must be 0"):
        base.replace(wstream_pairs=2)
    with pytest.raises(ConfigError, match="wstream_pairs=1 needs wstream_ahead > 0"):
        base.replace(wstream_ahead=0, wstream_pairs=1)
    for bad in ({"q4_groups": 0}, {"cols": 4, "rows": 4}):  # no 4-bit datapath; 4 columns, 2 x 4 ports
        with pytest.raises(ConfigError, match="wstream_pairs=1 needs the 4-bit datapath"):
            pairs.replace(**bad)
    assert pairs.reshaped(32, 32).wstream_pairs == 1 and pairs.reshaped(4, 4).wstream_pairs == 0


def test_wstream_latency_sizes_the_weight_ports_bursts_in_flight_and_keeps_the_default_hash():
    """wstream_latency: the DRAM latency each weight port keeps bursts in flight for (ceil(latency / burst) + 2, 3..16);
    the default is the hardware (and hash) of before the field."""
    from systolica.hw.weight_stream import stream_outstanding

    base = AccelConfig(cols=16, dma_bits=128, max_burst=64, dma_ports=4, wstream_ahead=1024)
    assert base.replace(wstream_latency=256).hash32() == base.hash32() and stream_outstanding(base) == 6
    short = base.replace(wstream_latency=128)
    assert short.hash32() != base.hash32() and AccelConfig.from_toml(short.to_toml()) == short
    assert stream_outstanding(short) == 4 and stream_outstanding(base.replace(wstream_latency=16)) == 3
    assert stream_outstanding(base.replace(max_burst=16, wstream_latency=4096)) == 16  # gmem0's arbiter holds 16
    assert stream_outstanding(base.replace(max_burst=16, wstream_latency=100)) == 9
    for bad, why in ((8, "must be a whole number of cycles in 16..4096"), (5000, "16..4096"), (100.5, "must be int")):
        with pytest.raises(ConfigError, match=f"wstream_latency={bad} .*{why}"):
            base.replace(wstream_latency=bad)
