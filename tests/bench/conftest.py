"""Every bench test gets an empty synthesis cache: no user's cached Yosys results leak into fits."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_synth_cache(private_synth_cache):
    """Every test here runs with the empty synthesis cache of tests/conftest.py."""
    yield
