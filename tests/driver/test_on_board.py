"""On a PYNQ board: the bitstream from `systolica build` runs the runtime bit-exactly with the golden backend.

Runs only on a board (the `board` marker skips elsewhere).  Point
SYSTOLICA_BITSTREAM at the deploy folder's .bit (its .hwh beside it); the
config of that build is read from the deploy folder's config.toml.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.board


def test_board_generates_the_golden_tokens():
    bit = os.environ.get("SYSTOLICA_BITSTREAM")
    if not bit:
        pytest.skip("set SYSTOLICA_BITSTREAM to the deploy folder's .bit to run on this board")
    from systolica.compiler.compile import compile_model
    from systolica.config import AccelConfig
    from systolica.driver.device import open_device
    from systolica.driver.runtime import Runtime
    from systolica.testmodels import random_model

    cfg = AccelConfig.load(Path(bit).with_name("config.toml"))
    model = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=300, seed=1, max_seq=64)
    art = compile_model(model, cfg, page=16, max_seq=64)
    prompt = [5, 17, 42, 99, 3]
    want = [s.token for s in Runtime(art, open_device("golden", cfg)).generate(prompt, 8, stop=[])]
    got = [s.token for s in Runtime(art, open_device("pynq", cfg, bitstream=bit)).generate(prompt, 8, stop=[])]
    assert got == want
