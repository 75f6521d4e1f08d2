"""Fixtures of the whole-model tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def smollm2():
    """The parsed SmolLM2-135M-Instruct GGUF (skips when the checkpoint has not been fetched)."""
    from systolica.compiler.gguf_reader import read_gguf
    from systolica.compiler.model_zoo import locate_default_model

    path = locate_default_model()
    if path is None:
        pytest.skip("SmolLM2 checkpoint not fetched: run `python -m systolica.compiler.model_zoo fetch`")
    return read_gguf(path)
