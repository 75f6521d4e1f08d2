"""One entry point for every checkpoint format: ``load_model(path)`` picks the front end.

- ``*.gguf`` -> :func:`~systolica.compiler.gguf_reader.read_gguf`
- a directory with ``config.json``, or a ``*.safetensors`` file -> :func:`~systolica.compiler.safetensors_reader.read_safetensors`
- ``"default"`` -> the cached default model of :mod:`~systolica.compiler.model_zoo` (never downloads)
- ``"random:ARCH[:key=value,...]"`` -> :func:`~systolica.testmodels.random_model` (no checkpoint needed:
  for trying a configuration or a test; values are integers or ``true``/``false``)
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

from systolica.model import Model, ModelError

from .gguf_reader import GGUF_MAGIC, read_gguf
from .model_zoo import DEFAULT_MODEL, locate_default_model
from .safetensors_reader import read_safetensors

__all__ = ["load_model"]

RANDOM_PREFIX = "random:"
_FORMATS = ("a .gguf file, a Hugging Face directory with config.json + *.safetensors, 'default', "
            "or random:ARCH[:key=value,...]")


def _random_model(spec: str) -> Model:
    """``random:ARCH[:key=value,...]`` -> a seeded random model (integer or true/false values)."""
    from systolica.testmodels import random_model

    _, arch, *rest = spec.split(":", 2)
    kw: dict[str, int | bool] = {}
    for item in rest[0].split(",") if rest and rest[0] else []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ModelError(f"{spec!r}: {item!r} is not key=value (example: random:llama:dim=64,n_layers=2)")
        if value.lower() in ("true", "false"):
            kw[key] = value.lower() == "true"
        else:
            try:
                kw[key] = int(value)
            except ValueError:
                raise ModelError(f"{spec!r}: {key}={value!r} is neither an integer nor true/false") from None
    known = set(inspect.signature(random_model).parameters) - {"arch"}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise ModelError(f"{spec!r}: unknown key(s) {', '.join(unknown)}; random_model takes {', '.join(sorted(known))}")
    return random_model(arch, **kw)


def load_model(source: str | os.PathLike) -> Model:
    """Read a checkpoint into a checked :class:`Model`, whatever its format.

    Parameters
    ----------
    source : str or path-like
        A ``.gguf`` file, a Hugging Face checkpoint directory (``config.json`` + safetensors), a
        ``.safetensors`` file, ``"default"`` for the cached default model, or
        ``"random:ARCH[:key=value,...]"`` for a random model (e.g. ``random:llama:dim=64,n_layers=2``).

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
    if str(source).startswith(RANDOM_PREFIX):
        return _random_model(str(source))
    path = Path(source)
    if path.is_dir():
        return read_safetensors(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file or directory (give {_FORMATS})")
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if path.suffix == ".gguf" or magic == GGUF_MAGIC:
        return read_gguf(path)
    raise ModelError(f"{path}: unknown checkpoint format (magic {magic!r}); systolica reads .gguf files and "
                     f"Hugging Face directories with config.json + *.safetensors")
