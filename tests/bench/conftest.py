"""Every bench test gets an empty synthesis cache: no user's cached Yosys results leak into fits."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_synth_cache(tmp_path_factory):
    """An empty synthesis cache for the whole session (module fixtures included): no user's cached
    Yosys results leak into fit verdicts.  The hw/ digest is pinned: other work editing hw/ while the
    tests run must not make a record stored a moment ago look stale."""
    from systolica.boards import synth_cache

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYSTOLICA_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setattr(synth_cache, "hw_digest", lambda: "test-hw-sources")
        yield
