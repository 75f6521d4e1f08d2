"""One entry point for every checkpoint format: ``load_model(path)`` picks the front end.

- ``*.gguf`` -> :func:`~systolica.compiler.gguf_reader.read_gguf`
- a directory with ``config.json``, or a ``*.safetensors`` file -> :func:`~systolica.compiler.safetensors_reader.read_safetensors`
- ``"default"`` -> the cached default model of :mod:`~systolica.compiler.model_zoo` (never downloads)
"""

from __future__ import annotations

import os
from pathlib import Path

from systolica.model import Model, ModelError

from .gguf_reader import GGUF_MAGIC, read_gguf
from .model_zoo import DEFAULT_MODEL, locate_default_model
from .safetensors_reader import read_safetensors

__all__ = ["load_model"]


def load_model(source: str | os.PathLike) -> Model:
    """Read a checkpoint into a checked :class:`Model`, whatever its format.

    Parameters
    ----------
    source : str or path-like
        A ``.gguf`` file, a Hugging Face checkpoint directory (``config.json`` + safetensors), a
        ``.safetensors`` file, or ``"default"`` for the cached default model.

    Raises
    ------
    ModelError
        The source does not exist or is not a known format (the front ends raise their own
        subclasses for problems inside a file).
    """
    if str(source) == "default":
        found = locate_default_model()
        if found is None:
            raise ModelError(f"the default model ({DEFAULT_MODEL.name}) is not cached; fetch it once with: "
                             f"python -m systolica.compiler.model_zoo fetch")
        return read_gguf(found)
    path = Path(source)
    if path.is_dir():
        return read_safetensors(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file or directory")
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if path.suffix == ".gguf" or magic == GGUF_MAGIC:
        return read_gguf(path)
    raise ModelError(f"{path}: unknown checkpoint format (magic {magic!r}); systolica reads .gguf files and "
                     f"Hugging Face directories with config.json + *.safetensors")
