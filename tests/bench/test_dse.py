"""Design-space exploration: Pareto front on synthetic points, variants, layer extrapolation, parallel runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from systolica.bench.dse import (
    evaluate,
    front_of,
    make_tasks,
    pareto_front,
    run_tasks,
    variants,
)
from systolica.bench.dse_programs import _model, _time
from systolica.config import AccelConfig, preset

MODEL = "random:llama:dim=32,n_layers=4,n_heads=4,n_kv_heads=2,vocab=128"


def test_pareto_front_on_hand_made_points():
    obj = (("speed", "max"), ("dsp", "min"))
    pts = [{"speed": 10, "dsp": 100},  # 0: on the front
           {"speed": 5, "dsp": 50},  # 1: on the front (cheaper)
           {"speed": 5, "dsp": 80},  # 2: dominated by 1
           {"speed": 12, "dsp": 200},  # 3: on the front (fastest)
           {"speed": 10, "dsp": 100},  # 4: equal to 0: kept
           {"speed": 9, "dsp": 150}]  # 5: dominated by 0
    assert pareto_front(pts, obj) == [0, 1, 3, 4]
    with pytest.raises(ValueError, match="sense"):
        pareto_front(pts, (("speed", "up"),))
    with pytest.raises(ValueError, match="point 1 has no value for dsp"):
        pareto_front([{"speed": 1, "dsp": 1}, {"speed": 2}], obj)


def test_pareto_front_matches_brute_force_on_random_points():
    rng = np.random.default_rng(0)
    obj = (("a", "max"), ("b", "min"), ("c", "min"))
    for _ in range(20):
        x = rng.integers(0, 6, size=(30, 3))
        pts = [{"a": int(r[0]), "b": int(r[1]), "c": int(r[2])} for r in x]
        s = np.stack([x[:, 0], -x[:, 1], -x[:, 2]], axis=1)  # all "larger is better"
        ge = (s[:, None, :] >= s[None, :, :]).all(-1)  # ge[j, i]: j at least as good as i everywhere
        gt = (s[:, None, :] > s[None, :, :]).any(-1)
        dominated = (ge & gt).any(0)
        assert pareto_front(pts, obj) == [i for i in range(30) if not dominated[i]]


def test_variants_skip_invalid_shapes_and_narrow_lines():
    base = preset("default")
    got = variants(base, [(8, 8), (16, 16), (2, 128), (8, 4)], [64, 128])
    names = [c.name for c in got]
    assert "default-8x8-d64" in names and "default-16x16-d128" in names
    assert "default-8x8-d128" not in names  # an 8-byte scratchpad line is not a whole 16-byte beat
    assert all(c.cols <= 64 for c in got)  # cols=128 is not a valid config


def test_tasks_respect_the_board_port_width():
    tasks = make_tasks([MODEL], ["pynq-z2", "kv260"], [(8, 16)], [64, 128])
    widths = {(t["board"], t["config"]["dma_bits"]) for t in tasks}
    assert widths == {("pynq-z2", 64), ("kv260", 64), ("kv260", 128)}  # Zynq-7000 HP ports are 64-bit


def test_layer_extrapolation_agrees_with_timing_the_whole_model():
    t = make_tasks([MODEL], ["pynq-z2"], [(8, 16)], [64], prompt_len=16)[0]
    r = evaluate(t)
    from systolica.bench.accel_model import board_spec
    from systolica.config import AccelConfig

    dec, pre, _ = _time(_model(MODEL), AccelConfig.from_dict(t["config"]), board_spec("pynq-z2"), 16, "systolic")
    assert r["decode_cycles"] == pytest.approx(dec, rel=0.01)
    assert r["prefill_cycles"] == pytest.approx(pre, rel=0.01)
    assert r["joules_per_token"] == pytest.approx(r["power_w"] / r["decode_tokens_per_s"])
    # 8x16 is not square: the hardware generator refuses it, so it does not fit, whatever it would cost
    assert r["fit"] == "no" and r["fits"] is False and r["fit_tightest"] == "hardware rules"


def _fake_synth(cfg, board_name, **used):
    """A cached 'measured' synthesis of ``cfg`` (current hw/ sources) in the test's cache dir."""
    from systolica.boards.board import Resources, load_board
    from systolica.boards.synth_cache import store

    b = load_board(board_name)
    return store(cfg, b.family, b.family == "xcup" and b.resources.uram > 0, Resources(**used), seconds=12.0,
                 memories=[{"name": "spad_mem", "kind": "bram", "cell": "$__XILINX_BLOCKRAM_SDP_", "bits": None}])


def test_cached_programs_time_as_a_fresh_compile(tmp_path, monkeypatch):
    """A point times the programs a compile gives: from this process, from the disk cache, for any clock or name."""
    from systolica.bench import dse_programs
    from systolica.bench.accel_model import board_spec

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    two = "random:llama:dim=32,n_layers=2,n_heads=4,n_kv_heads=2,vocab=128"  # no layer extrapolation: exact
    t = make_tasks([two], ["pynq-z2"], [(8, 8)], [64])[0]
    dec, pre, rows = _time(_model(two), AccelConfig.from_dict(t["config"]), board_spec("pynq-z2"), 16, "systolic")
    first = evaluate(t)
    assert (first["decode_cycles"], first["prefill_cycles"], first["prefill_rows"]) == (dec, pre, rows)
    dse_programs._PROGRAMS.clear()  # as a new process: from the disk cache, not compiled
    progs = dse_programs.programs_for(t)
    assert progs["compiled"] is False and evaluate(t, progs) == first
    # the clock and the name change no instruction: one program key, and a compile gives the same words
    other = {**t, "config": {**t["config"], "clock_mhz": 150.0, "name": "renamed"}}
    assert dse_programs.program_key(other) == dse_programs.program_key(t)
    assert dse_programs._runs(_model(two), AccelConfig.from_dict(other["config"]), 16)[:2] == tuple(progs["depths"][0])


def test_swept_clock_and_dram_are_points_on_the_same_programs(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    tasks = make_tasks([MODEL], ["pynq-z2"], [(8, 8)], [64], clocks=[50, 100], dram_gbps=[0.2, 4.0])
    stats: dict = {}
    pts = run_tasks(tasks, workers=1, stats=stats)
    assert stats["compiled"] == 1 and stats["cached"] == 0 and len(pts) == 4
    by = {(p["clock"]["mhz"], p["dram_gbps"]): p for p in pts}
    assert all(p["clock"]["basis"] == "swept" and p["dram_basis"] == "swept" for p in pts)
    assert by[(100, 4.0)]["decode_tokens_per_s"] > by[(50, 4.0)]["decode_tokens_per_s"]
    assert by[(100, 4.0)]["decode_cycles"] < by[(100, 0.2)]["decode_cycles"]  # below the port: DRAM-bound
    assert run_tasks(tasks, workers=1, stats=stats) == pts and stats["compiled"] == 0  # this process's programs


def test_points_are_fits_only_when_synthesis_measured_them(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    t8, t16 = make_tasks([MODEL], ["pynq-z2"], [(8, 8), (16, 16)], [64])
    # nothing cached: not measured, no resource counts, no per-PE guess
    p = evaluate(t16)
    assert p["fit"] == "not measured" and p["fits"] is None and p["dsp"] is None and "no synthesis" in p["fit_reason"]
    assert p["clock"]["basis"] == "assumed" and p["clock"]["measured_fmax_mhz"] is None
    assert p["power"]["basis"] == "assumed" and "pynq-z2.toml" in p["power"]["source"]  # [?] in the board file
    # a measured synthesis that overflows the LUTs: does not fit, tightest LUT
    _fake_synth(AccelConfig.from_dict(t16["config"]), "pynq-z2", lut=120000, ff=9000, dsp=300, bram=40)
    p = evaluate(t16)
    assert p["fit"] == "no" and p["fit_tightest"] == "LUT 226%" and p["dsp"] == 300
    _fake_synth(AccelConfig.from_dict(t8["config"]), "pynq-z2", lut=20000, ff=30000, dsp=80, bram=60)
    assert evaluate(t8)["fit"] == "yes"


def test_front_is_chosen_among_measured_fits_only():
    pts = [{"model": "m", "fit": "yes", "decode_tokens_per_s": 10, "dsp": 100, "bram": 10, "joules_per_token": 1},
           {"model": "m", "fit": "no", "decode_tokens_per_s": 99, "dsp": 1, "bram": 1, "joules_per_token": 0.1},
           {"model": "m", "fit": "not measured", "decode_tokens_per_s": 50, "dsp": None, "bram": None,
            "joules_per_token": 0.2},
           {"model": "m", "fit": "yes", "decode_tokens_per_s": 5, "dsp": 200, "bram": 20, "joules_per_token": 2}]
    assert front_of(pts) == {0}  # 1 and 2 would dominate everything, but nobody can build them


def test_parallel_run_equals_serial():
    tasks = make_tasks([MODEL], ["pynq-z2"], [(4, 8), (8, 8)], [64])
    serial = run_tasks(tasks, workers=1)
    parallel = run_tasks(tasks, workers=2)
    assert [p["decode_cycles"] for p in serial] == [p["decode_cycles"] for p in parallel]


def _need_ray() -> None:
    """Skip without Ray; not imported here: run_tasks imports it after choosing loopback addresses."""
    import importlib.util
    import shutil
    import sys
    from pathlib import Path

    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (optional extra: pip install -e .[ray])")
    if not (Path(sys.executable).with_name("ray").exists() or shutil.which("ray")):
        pytest.skip(f"Ray is installed but its `ray` command is not beside {sys.executable} nor on PATH")


def _ray_shutdown() -> None:
    import sys

    if "ray" in sys.modules:
        sys.modules["ray"].shutdown()


def test_ray_local_mode():
    _need_ray()
    tasks = make_tasks([MODEL], ["pynq-z2"], [(8, 8)], [64])
    try:
        got = run_tasks(tasks, ray_address="local")
    finally:
        _ray_shutdown()
    assert got[0]["decode_cycles"] == run_tasks(tasks, workers=1)[0]["decode_cycles"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster(tmp_path, monkeypatch):
    """A real Ray head node on 127.0.0.1 (one CPU), started with `ray start --head --block` in its own process
    group and stopped by that group, also when the test fails."""
    import os
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    _need_ray()
    exe = Path(sys.executable).with_name("ray")
    exe = exe if exe.exists() else Path(shutil.which("ray"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray keeps 127.0.0.1 as the node address (else it swaps in the machine's
    # address and binds its ports there); SYSTOLICA_CACHE: the workers see the test's caches
    # RAY_AUTH_MODE=disabled: no token (the head listens on loopback only; without it, a token some earlier Ray run
    # left in ~/.ray switches the head to token mode while this driver does not send one)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "SYSTOLICA_CACHE": str(tmp_path / "cache"),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    log = open(tmp_path / "ray.log", "wb")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen([str(exe), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={tmp}",
                             "--disable-usage-stats"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited with {proc.returncode}: {(tmp_path / 'ray.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"Ray's head did not listen on 127.0.0.1:{port} within 90 s")
                time.sleep(0.5)
        yield f"127.0.0.1:{port}", tmp_path / "cache"
    finally:
        _ray_shutdown()
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):  # Ray drains up to 30 s on SIGTERM: not waited for
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # the group outlives `ray start` while its daemons stop: wait for the group to be gone
            end = time.monotonic() + wait
            while time.monotonic() < end:
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                continue
            break
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_sweep_on_a_real_local_ray_cluster_gives_the_local_front(ray_cluster, monkeypatch):
    """The same sweep (shapes x clocks, two measured fits) on local processes and on a Ray head node on 127.0.0.1."""
    import importlib.util
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from systolica.boards import synth_cache

    address, cache = ray_cluster
    monkeypatch.setenv("SYSTOLICA_CACHE", str(cache))
    # the Ray workers run outside this process, without tests/conftest.py's stand-in digest of hw/: store and read
    # the records under the real one (hw_digest's own computation)
    root = Path(next(iter(importlib.util.find_spec("systolica.hw").submodule_search_locations)))
    real = synth_cache._hw_digest_cached(str(root), tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                                                          for p in sorted(root.glob("*.py"))))
    monkeypatch.setattr(synth_cache, "hw_digest", lambda: real)
    tasks = make_tasks([MODEL], ["pynq-z2"], [(8, 8), (16, 16), (32, 32)], [64], clocks=[80, 100])
    _fake_synth(AccelConfig.from_dict(tasks[0]["config"]), "pynq-z2", lut=20000, ff=30000, dsp=80, bram=60)
    _fake_synth(AccelConfig.from_dict(tasks[2]["config"]), "pynq-z2", lut=30000, ff=30000, dsp=150, bram=40)
    local = run_tasks(tasks, workers=1)
    with ThreadPoolExecutor(1) as ex:  # bounded: a hung cluster fails the test, and the fixture stops it
        remote = ex.submit(run_tasks, tasks, ray_address=address).result(timeout=240)
    assert all("error" not in p for p in local)
    for a, b in zip(local, remote, strict=True):
        assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    front = front_of(local)
    assert front == front_of(remote) and len(front) >= 2


def test_dse_command_line(tmp_path, monkeypatch):
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    t8, t16, t32 = make_tasks([MODEL], ["pynq-z2"], [(8, 8), (16, 16), (32, 32)], [64])
    _fake_synth(AccelConfig.from_dict(t8["config"]), "pynq-z2", lut=20000, ff=30000, dsp=80, bram=60)
    _fake_synth(AccelConfig.from_dict(t16["config"]), "pynq-z2", lut=120000, ff=9000, dsp=300, bram=40)
    out, png = tmp_path / "dse.json", tmp_path / "plots" / "dse_pareto.png"
    rc = main(["dse", "--models", MODEL, "--boards", "pynq-z2", "--shapes", "8x16,8x8,16x16,32x32", "--dma-bits",
               "64", "-j", "1", "--json", str(out), "--plots", str(png.parent)])
    assert rc == 0
    doc = json.loads(out.read_text())
    fit = {p["config"]: p["fit"] for p in doc["points"]}
    assert fit == {"pynq-z2-8x16-d64": "no", "pynq-z2-8x8-d64": "yes", "pynq-z2-16x16-d64": "no",
                   "pynq-z2-32x32-d64": "not measured"}
    # the front holds only the measured fit, though the others decode faster
    assert [doc["points"][i]["config"] for i in doc["pareto"]] == ["pynq-z2-8x8-d64"]
    assert png.stat().st_size > 1000
    assert doc["timing"]["points"] == 4 and doc["timing"]["points_per_s"] > 0 and doc["timing"]["workers"] == 1
    assert main(["dse", "--models", MODEL, "--shapes", "8by8"]) == 2


def test_synth_runs_yosys_only_for_what_is_missing(tmp_path, monkeypatch):
    """dse --synth: one (stubbed) Yosys run per uncached configuration the hardware accepts."""
    from systolica.bench.dse import synthesize_missing
    from systolica.boards import synth_cache
    from systolica.boards.board import Resources

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    tasks = make_tasks([MODEL, MODEL], ["pynq-z2"], [(8, 16), (8, 8), (16, 16)], [64])
    _fake_synth(AccelConfig.from_dict(tasks[2]["config"]), "pynq-z2", lut=1, ff=1, dsp=1, bram=1)  # 8x8 cached
    ran = []

    def fake(cfg, board, **k):
        ran.append(cfg.name)
        return synth_cache.store(cfg, board.family, False, Resources(lut=2), seconds=3.0)

    monkeypatch.setattr(synth_cache, "synthesize", fake)
    out = synthesize_missing(tasks)
    assert ran == ["pynq-z2-16x16-d64"]  # 8x16 is refused by the hardware rules, 8x8 is cached, one run per config
    assert out == [{"board": "pynq-z2", "config": "pynq-z2-16x16-d64", "seconds": 3.0,
                    "cache": str(synth_cache.record_path(AccelConfig.from_dict(tasks[4]["config"]), "xc7", False))}]
