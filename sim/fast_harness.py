"""Fast RTL path: the Verilated accelerator with a C++ DRAM model, no Python on the clock edge.

:class:`FastRtl` builds ``fast_harness.cpp`` against the generated Verilog once per
configuration (cached like :mod:`systolica.sim.rtl_build`), then runs programs by
writing the DRAM image to a file, running the binary and reading the image and
a JSON result back.  The CSR offsets the C++ uses are generated from
:data:`systolica.csr.REGISTERS`, so the harness cannot drift from the map.

The DRAM model answers every burst after a fixed latency (``dram_latency=`` of :meth:`FastRtl.run`, or
``$SYSTOLICA_DRAM_LATENCY``; default 0, the model's minimum of one cycle) with any number of bursts
outstanding; :attr:`FastResult.ports` counts the beats and bursts of every AXI port.

The binary is built from :func:`fast_top_verilog`'s top, the accelerator behind a registered reset,
which keeps Verilator from evaluating every next-state expression in its input region twice a cycle
(docs/performance.md, "RTL fast path").

``python -m systolica.sim.fast_harness --bench`` runs one weight-streaming program
on this path and on the cocotb path (cocotbext-axi models in Python) and prints
the simulated cycles per wall and per CPU second of both side by side, with how each was built
(``--pgo``: the fast path's profile-guided build); ``--read-bandwidth --latency 100`` measures the
fraction of a port's peak (one beat a cycle) that one long LOAD reaches behind that DRAM latency.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from systolica.config import AccelConfig, load_config
from systolica.csr import COUNTERS, REGISTERS
from systolica.faults import Fault

from .rtl_build import WAVES_ARGS, _patched_environ, verilator_env, waves_format

__all__ = ["FastRtl", "FastResult", "PortStats", "FastHarnessError", "DRAM_LATENCY_ENV", "cocotb_build", "top_verilog", "fast_top_verilog", "bench",
           "format_bench",
           "read_bandwidth", "default_build_root"]

_CPP = Path(__file__).with_name("fast_harness.cpp")
TOP = "systolica_accel"
#: the Verilog top the harness builds: :data:`TOP` behind a registered reset (see :func:`fast_top_verilog`)
FAST_TOP = "systolica_fast_top"
# -O3 and --x-assign fast: ~1.8x the simulated cycles/s of -O2 on the tiny top level (measured: 218k vs 122k)
_FAST_ARGS = ("-Wno-fatal", "-O3", "--x-assign", "fast")
#: C++ flags of the second compile of a ``pgo=True`` build (a function no training run reached is compiled as usual)
_PGO_USE = ("-fprofile-use", "-fprofile-partial-training", "-Wno-missing-profile")
_PORT_RE = re.compile(r"^\s*(input|output)\s+(\[[^\]]+\]\s*)?([A-Za-z_][A-Za-z0-9_$]*)\s*;", re.M)
#: environment variable with the DRAM model's read / write-response latency in cycles (default 0)
DRAM_LATENCY_ENV = "SYSTOLICA_DRAM_LATENCY"


def default_build_root() -> Path:
    """Where RTL harness builds are cached outside the tests: ``$SYSTOLICA_BUILD_DIR``, else ~/.cache/systolica/rtl."""
    return Path(os.environ.get("SYSTOLICA_BUILD_DIR", Path.home() / ".cache" / "systolica" / "rtl"))


class FastHarnessError(RuntimeError):
    """The harness could not be built or did not run."""


@dataclass(frozen=True)
class PortStats:
    """What the DRAM model saw on one AXI port ``m_axi_gmem<i>`` during a run (handshakes)."""

    rd_beats: int  # R beats
    wr_beats: int  # W beats (strobed or not)
    ar_bursts: int
    aw_bursts: int


@dataclass
class FastResult:
    done: bool
    status: int
    code: Fault
    pc: int
    sim_cycles: int  # clock cycles from START to the interrupt
    wall_s: float  # wall time of those cycles inside the binary
    violations: int  # DRAM bytes touched outside the window (must be 0)
    counters: dict
    dram_latency: int = 0  # the DRAM model's latency in cycles for this run
    ports: tuple[PortStats, ...] = ()  # per AXI port, gmem0 first
    cpu_s: float = 0.0  # CPU time of the binary over those cycles (unlike wall_s, not slowed by other processes)

    @property
    def cycles_per_s(self) -> float:
        return self.sim_cycles / self.wall_s if self.wall_s else float("inf")

    @property
    def cycles_per_cpu_s(self) -> float:
        return self.sim_cycles / self.cpu_s if self.cpu_s else float("inf")

    def read_bytes_per_cycle(self, port: int, beat_bytes: int) -> float:
        """Bytes read through ``port`` per cycle of the run (``beat_bytes``: the config's ``dma_bytes``)."""
        return self.ports[port].rd_beats * beat_bytes / self.sim_cycles if self.sim_cycles else 0.0


def _headers(cfg: AccelConfig) -> dict[str, str]:
    regs = "\n".join(f"#define REG_{r.name} {r.offset:#x}" for r in REGISTERS)
    names = ", ".join(f'"{n}"' for n in COUNTERS)
    offs = ", ".join(f"{o:#x}" for o in COUNTERS.values())
    regs += (f"\nstatic const int N_COUNTERS = {len(COUNTERS)};\nstatic const char* COUNTER_NAMES[] = {{{names}}};"
             f"\nstatic const unsigned COUNTER_OFFSETS[] = {{{offs}}};\n")
    if cfg.dma_bytes > 64:
        raise FastHarnessError(f"dma_bits={cfg.dma_bits}: the harness moves at most 512-bit beats")
    ports = " ".join(f"X({p})" for p in range(cfg.dma_ports))
    port_h = f"#define DMA_BYTES {cfg.dma_bytes}u\n#define NPORTS {cfg.dma_ports}\n#define FOR_EACH_PORT(X) {ports}\n"
    return {"fast_regs.h": "// generated from systolica/csr.py\n" + regs,
            "fast_ports.h": "// generated from the AccelConfig\n" + port_h}


class FastRtl:
    """A compiled C++ harness of the accelerator for one configuration.

    Parameters
    ----------
    cfg
        The configuration to build.
    build_root
        Folder for cached builds (one sub-folder per configuration and source digest).
    waves
        Build with tracing (``True``: FST where Verilator's FST writer builds here, else VCD; or ``"fst"`` /
        ``"vcd"``): then :meth:`run` can write a waveform.  Tracing builds and runs are slower.
    pgo
        Build with gcc's profile-guided optimization: an instrumented binary runs an 8-tile GEMV and 8 random
        ISA programs, then the model is compiled again with those counts (~2x the build time, ~10-25 % more
        cycles/s on ``tiny``).  Cached in its own folder; not with ``waves``.
    """

    def __init__(self, cfg: AccelConfig, build_root: str | Path, *, waves: bool | str = False, pgo: bool = False):
        self.cfg = cfg
        self.waves = (waves_format() if waves is True else waves) or ""
        if pgo and self.waves:
            raise ValueError("pgo=True and waves= do not mix: a tracing build is compiled without optimization")
        self.pgo = bool(pgo)
        self._args = _FAST_ARGS + (WAVES_ARGS[self.waves] if self.waves else ())
        # a tracing run is for looking at, and short: compile it without optimization (a third of the build time)
        self._opt = "-O0" if self.waves else "-O3"
        self._verilog = top_verilog(cfg)  # keyed by what is built (see cocotb_build)
        h = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode())
        h.update(self._verilog.encode())
        h.update(fast_top_verilog(self._verilog).encode())
        h.update(_CPP.read_bytes())
        h.update(" ".join(self._args + ((self._opt,) if self.waves else ())).encode())
        if self.pgo:
            h.update(b" ".join(f.encode() for f in _PGO_USE))
        self.dir = Path(build_root).resolve() / f"fast_{TOP}{'-pgo' if self.pgo else ''}-{h.hexdigest()[:12]}"
        self.binary = self.dir / "obj" / "harness"
        self._build()

    @property
    def flags(self) -> dict:
        """How the binary is built: its Verilog top, Verilator arguments, C++ flags and model threads."""
        cflags = " ".join((self._opt, *(_PGO_USE if self.pgo else ()), "-std=c++17"))
        return {"top": FAST_TOP, "verilator": list(self._args), "cflags": cflags, "threads": 1,
                "pgo": "trained on a GEMV and random ISA programs" if self.pgo else "off"}

    def _build(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.binary.exists():
                return
            (self.dir / f"{TOP}.v").write_text(self._verilog)
            (self.dir / f"{FAST_TOP}.v").write_text(fast_top_verilog(self._verilog))
            for name, text in _headers(self.cfg).items():
                (self.dir / name).write_text(text)
            if not self.pgo:
                self._verilate("harness", self._opt)
                return
            # compiler PGO: an instrumented binary runs the training programs (its counts land beside the
            # objects, obj/*.gcda), then every object is compiled again with those counts
            obj = self.dir / "obj"
            for f in obj.glob("*.gcda"):
                f.unlink()
            self._verilate("harness_train", f"{self._opt} -fprofile-generate", "-fprofile-generate")
            self._train(obj / "harness_train")
            for pattern in ("*.o", "*.a", "*.gch"):
                for f in obj.glob(pattern):
                    f.unlink()
            self._verilate("harness", " ".join((self._opt, *_PGO_USE)))

    def _verilate(self, out: str, cflags: str, ldflags: str = "") -> None:
        env = verilator_env()
        exe = "verilator"
        if "VERILATOR_ROOT" in env:
            exe = str(Path(env["VERILATOR_ROOT"]) / "bin" / "verilator")
        args = [exe, "--cc", "--exe", "--build", "-j", "2", "--top-module", FAST_TOP, "--prefix", f"V{TOP}",
                "-Mdir", "obj", "-o", out, *self._args, "-CFLAGS", f"{cflags} -std=c++17 -I{self.dir}",
                *(("-LDFLAGS", ldflags) if ldflags else ()), f"{TOP}.v", f"{FAST_TOP}.v", str(_CPP)]
        with _patched_environ(env):
            proc = subprocess.run(args, cwd=self.dir, capture_output=True, text=True)
        log = self.dir / "build.log"
        with open(log, "a") as f:
            f.write(" ".join(args) + "\n" + proc.stdout + proc.stderr)
        if proc.returncode or not (self.dir / "obj" / out).exists():
            raise FastHarnessError(f"Verilator build of the fast harness failed; see {log}:\n" + proc.stderr[-2000:])

    def _train(self, binary: Path) -> None:
        """Run the PGO training programs on the instrumented ``binary``: a weight-streaming GEMV, random programs."""
        from .accel_programs import random_program

        final, self.binary = self.binary, binary
        try:
            dram, (wb, ws), n = _stream_image(self.cfg, 8)
            self.run(dram, window_base=wb, window_size=ws, prog_base=0, prog_len=n)
            rng = np.random.default_rng(15)
            mem, wb, ws, lo, hi = 1 << 18, 0x1_0000, 0x2_0000, 0x1000, 0x9000
            for i in range(8):
                prog = random_program(self.cfg, rng, n_ops=int(rng.integers(8, 20)), data_lo=lo, data_hi=hi,
                                      win_size=ws, fault=None, dump_at=hi)
                dram = np.zeros(mem, np.uint8)
                dram[wb + lo:wb + hi] = rng.integers(0, 256, hi - lo, dtype=np.uint8)
                code = b"".join(int(w).to_bytes(16, "little") for w in prog.words)
                dram[wb:wb + len(code)] = np.frombuffer(code, np.uint8)
                self.run(dram, window_base=wb, window_size=ws, prog_base=0, prog_len=len(prog.words),
                         max_cycles=200_000, stall_percent=30 if i % 2 else 0, seed=i)
        finally:
            self.binary = final

    def run(self, dram: np.ndarray, *, window_base: int, window_size: int, prog_base: int, prog_len: int,
            max_cycles: int = 50_000_000, stall_percent: int = 0, seed: int = 0,
            waves_file: str | Path | None = None,
            slverr: dict[str, tuple[int, int]] | None = None, dram_latency: int | None = None) -> FastResult:
        """Run the program already in ``dram`` (a 1-D uint8 array, updated in place).

        ``stall_percent`` > 0: the C++ DRAM model withholds ready/valid at random on every AXI channel.
        ``slverr``: ``{"read": (lo, hi), "write": (lo, hi)}`` physical ranges the DRAM model answers with
        SLVERR (error injection; a beat beyond the DRAM image is always answered DECERR).
        ``waves_file``: write the run's waveform there (a tracing build only: ``waves`` of the constructor).
        ``dram_latency``: cycles from a burst's AR handshake to its first R beat, and from a write burst's last
        W beat to its B response (0 and 1: one cycle, the minimum); ``None`` takes ``$SYSTOLICA_DRAM_LATENCY``
        (default 0).  Bursts are answered in order per port, any number outstanding.
        """
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise TypeError(f"dram must be a 1-D uint8 array, got {dram.dtype} {dram.shape}")
        if waves_file is not None and not self.waves:
            raise FastHarnessError("waves_file needs a tracing build: FastRtl(..., waves=True)")
        env = dict(os.environ, SYSTOLICA_WAVES_FILE=str(Path(waves_file).resolve()) if waves_file else "")
        env[DRAM_LATENCY_ENV] = str(_dram_latency(dram_latency))
        for kind, rng in (slverr or {}).items():
            if kind not in ("read", "write"):
                raise ValueError(f"slverr keys are 'read' and 'write', not {kind!r}")
            env[f"SYSTOLICA_SLVERR_{kind.upper()}"] = f"{int(rng[0]):#x}:{int(rng[1]):#x}"
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
            dram.tofile(src)
            proc = subprocess.run([str(self.binary), str(src), str(dst), hex(window_base), hex(window_size),
                                   hex(prog_base), str(prog_len), str(max_cycles), str(int(stall_percent)),
                                   str(int(seed))], capture_output=True, text=True, env=env)
            if proc.returncode:
                raise FastHarnessError(f"harness exited with {proc.returncode}: {proc.stderr[-2000:]}")
            dram[:] = np.fromfile(dst, np.uint8)
        d = json.loads(proc.stdout.strip().splitlines()[-1])
        return FastResult(d["done"], d["status"], Fault(d["code"]), d["pc"], d["sim_cycles"], d["wall_s"],
                          d["violations"], d["counters"], d["dram_latency"], tuple(PortStats(**q) for q in d["ports"]),
                          d["cpu_s"])


def _dram_latency(value: int | None) -> int:
    """The latency a run uses: ``value``, else ``$SYSTOLICA_DRAM_LATENCY``, else 0 (checked: a whole number >= 0)."""
    src = "dram_latency"
    if value is None:
        value, src = os.environ.get(DRAM_LATENCY_ENV, "").strip() or 0, f"${DRAM_LATENCY_ENV}"
    try:
        lat = int(value)
    except (TypeError, ValueError):
        lat = -1
    if lat < 0 or (isinstance(value, float) and value != lat):
        raise ValueError(f"{src}={value!r}: the DRAM latency is a whole number of cycles >= 0 (e.g. 100)")
    return lat


def fast_top_verilog(verilog: str) -> str:
    """A top level around :data:`TOP` that registers ``ap_rst_n`` on ``ap_clk`` before it reaches the accelerator.

    Every next-state expression Amaranth emits ends in ``if (rst) ... = init``, and ``rst`` is
    ``~ap_rst_n``: with the reset a primary input, Verilator evaluates all of that logic in its
    input-combinational region as well, on every ``eval()`` (twice a cycle), besides once after
    the clock edge.  Behind a register the reset is state, so the logic runs once a cycle
    (measured on the tiny top level: 38 % of the time was that region, 3.5 % after).
    The reset reaches the accelerator one cycle later; the harness holds it and waits one more
    cycle.  Every other port passes straight through, with the same name.
    """
    head = verilog[verilog.index(f"module {TOP}("):]
    ports = _PORT_RE.findall(head[:head.index("endmodule")])
    names = [n for _, _, n in ports]
    if "ap_rst_n" not in names or "ap_clk" not in names:
        raise FastHarnessError(f"{TOP} has no ap_clk / ap_rst_n port (ports: {names[:8]}...)")
    decl = "\n".join(f"  {d} {w}{n};" for d, w, n in ports)
    conn = ",\n".join(f"    .{n}({'rst_n_q' if n == 'ap_rst_n' else n})" for n in names)
    return (f"// generated by systolica/sim/fast_harness.py: {TOP} behind a registered reset\n"
            f"module {FAST_TOP}({', '.join(names)});\n{decl}\n"
            f"  reg rst_n_q = 1'h0;\n  always @(posedge ap_clk) rst_n_q <= ap_rst_n;\n"
            f"  {TOP} core (\n{conn}\n  );\nendmodule\n")


@functools.lru_cache(maxsize=4)
def top_verilog(cfg: AccelConfig) -> str:
    """Verilog of the top level, elaborated from the modules this process has loaded (once per config)."""
    from amaranth.back import verilog

    from systolica.hw.accelerator import Accelerator

    return verilog.convert(Accelerator(cfg), name=TOP, emit_src=False)


def cocotb_build(cfg: AccelConfig, build_root: str | Path):
    """The cached Verilator build of the top level for cocotb (shared by tests and the benchmark).

    The cache key is the hash of the Verilog itself (a few seconds to regenerate), not of the source
    files: a process holding older modules in memory can then never file its build under a newer key.
    """
    from systolica.hw.accelerator import Accelerator

    from .rtl_build import build

    digest = hashlib.sha256(top_verilog(cfg).encode()).hexdigest()
    return build(TOP, lambda: Accelerator(cfg), {"cfg": cfg.to_dict(), "verilog": digest}, build_root, deps=())


# ------------------------------------------------------------------ benchmark
def _stream_image(cfg: AccelConfig, tiles: int, seed: int = 5):
    """DRAM image with a weight-streaming GEMV program; returns (dram, window, prog_len)."""
    from systolica.isa import encode

    from .accel_programs import weight_stream_program

    k_lines, n_lines, c = 32, 2, cfg.cols
    win_base, prog_base, a_dram, out_dram, w_dram = 0x1_0000, 0, 0x1000, 0x1800, 0x2000
    w_bytes = tiles * n_lines * c * k_lines * c
    win_size = 1 << (w_dram + w_bytes).bit_length()
    dram = np.zeros(win_base + win_size, np.uint8)
    rng = np.random.default_rng(seed)
    dram[win_base + a_dram:win_base + a_dram + k_lines * c] = rng.integers(0, 256, k_lines * c, dtype=np.uint8)
    dram[win_base + w_dram:win_base + w_dram + w_bytes] = rng.integers(0, 256, w_bytes, dtype=np.uint8)
    words = [encode(i) for i in weight_stream_program(cfg, k_lines=k_lines, n_tiles=tiles, n_lines=n_lines,
                                                      w_dram=w_dram, a_dram=a_dram, out_dram=out_dram)]
    prog = b"".join(w.to_bytes(16, "little") for w in words)
    dram[win_base + prog_base:win_base + prog_base + len(prog)] = np.frombuffer(prog, np.uint8)
    return dram, (win_base, win_size), len(words)


def bench(cfg: AccelConfig, build_root: Path, tiles: int, repeats: int = 3, pgo: bool = False) -> dict:
    """Simulated cycles per second of the fast path and of the cocotb path on the same program, in one process.

    The fast path runs ``repeats`` times (its runs take a fraction of a second, so the best of a few shows
    what the binary does when the machine's other work leaves it a core); the cocotb path runs once.  Both
    report cycles over wall time and over the simulator process's CPU time (the latter is what a shared
    machine does not change much).  ``flags`` says how each was built; ``pgo``: the fast path is the
    profile-guided build (``FastRtl(..., pgo=True)``: two compiles and a training run the first time).
    """
    from .rtl_build import VERILATOR_ARGS

    dram, (wb, ws), n = _stream_image(cfg, tiles)
    fast = FastRtl(cfg, build_root, pgo=pgo)
    runs, totals = [], []
    for _ in range(max(1, repeats)):
        fdram = dram.copy()
        t = time.perf_counter()
        runs.append(fast.run(fdram, window_base=wb, window_size=ws, prog_base=0, prog_len=n))
        totals.append(time.perf_counter() - t)
    fr = max(runs, key=lambda r: r.cycles_per_s)
    # cocotb: the same image, program and window through cocotbext-axi models
    b = cocotb_build(cfg, build_root)
    here = str(Path(__file__).parent)
    sys.path.insert(0, here)  # cocotb's runner passes this process's sys.path to the simulator as PYTHONPATH
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "dram.npy", dram)
        res = b.run("tb_accel_bench", Path(__file__).parent, params={
            "cfg": cfg.to_dict(), "dram": str(Path(tmp) / "dram.npy"), "window": [wb, ws], "prog_len": n,
            "out": str(Path(tmp) / "out.npy")}).check()
        cdram = np.load(Path(tmp) / "out.npy")
    sys.path.remove(here)
    m = res.metrics
    return {"program": f"weight-streaming GEMV, {tiles} tiles, {n} instructions", "config": cfg.name,
            "fast": {"sim_cycles": fr.sim_cycles, "wall_s": fr.wall_s, "cpu_s": fr.cpu_s,
                     "cycles_per_s": fr.cycles_per_s, "cycles_per_cpu_s": fr.cycles_per_cpu_s,
                     "runs_cycles_per_s": [r.cycles_per_s for r in runs], "process_wall_s": min(totals),
                     "code": fr.code.name, "violations": fr.violations,
                     "flags": fast.flags, "source": "sim/fast_harness.cpp: cycles START..interrupt, "
                                                    "timed inside the binary, best of the runs"},
            "cocotb": {"sim_cycles": m["sim_cycles"], "wall_s": m["wall_s"], "cpu_s": m.get("cpu_s", 0.0),
                       "cycles_per_s": m["sim_cycles"] / m["wall_s"],
                       "cycles_per_cpu_s": m["sim_cycles"] / m["cpu_s"] if m.get("cpu_s") else float("inf"),
                       "code": m["code"],
                       "flags": {"top": TOP, "verilator": list(VERILATOR_ARGS),
                                 "cflags": "verilated.mk default (-Os)", "threads": 1,
                                 "models": "cocotbext-axi AxiRam + AxiLiteMaster, Clock(impl='gpi')"},
                       "source": "sim/tb_accel_bench.py: sim time from the START write to the interrupt, "
                                 "timed in the cocotb test"},
            "same_cycles": fr.sim_cycles == m["sim_cycles"], "same_dram": bool(np.array_equal(fdram, cdram))}


def format_bench(r: dict) -> str:
    """The two paths of :func:`bench` side by side, with what each figure is and how each path was built."""
    f, c = r["fast"], r["cocotb"]
    ff, cf = f["flags"], c["flags"]
    rows = [("", "fast path (C++ harness)", "cocotb path"),
            ("simulated cycles", f"{f['sim_cycles']:,}", f"{c['sim_cycles']:,}"),
            ("wall s", f"{f['wall_s']:.4f}", f"{c['wall_s']:.3f}"),
            ("cycles / wall s", f"{f['cycles_per_s']:,.0f}", f"{c['cycles_per_s']:,.0f}"),
            ("cycles / CPU s", f"{f['cycles_per_cpu_s']:,.0f}", f"{c['cycles_per_cpu_s']:,.0f}"),
            ("top", ff["top"], cf["top"]),
            ("verilator", " ".join(ff["verilator"]), " ".join(cf["verilator"])),
            ("C++ flags", ff["cflags"], cf["cflags"]),
            ("threads", str(ff["threads"]), str(cf["threads"])),
            ("compiler PGO", ff["pgo"], "off")]
    w0, w1 = max(len(a) for a, _, _ in rows), max(len(b) for _, b, _ in rows)
    lines = [f"{r['config']}: {r['program']}; same DRAM: {r['same_dram']}"]
    lines += [f"  {a:<{w0}}  {b:<{w1}}  {cc}" for a, b, cc in rows]
    runs = ", ".join(f"{x:,.0f}" for x in f["runs_cycles_per_s"])
    lines.append(f"  fast path: best of {len(f['runs_cycles_per_s'])} runs ({runs} cycles/s); "
                 f"{f['cycles_per_s'] / c['cycles_per_s']:.0f}x the cocotb path (wall)")
    lines.append(f"  fast: {f['source']}")
    lines.append(f"  cocotb: {c['source']}")
    return "\n".join(lines)


def read_bandwidth(cfg: AccelConfig, build_root: Path, latency: int, nbytes: int | None = None) -> dict:
    """What one long LOAD reads per cycle on ``gmem0`` behind a DRAM of ``latency`` cycles.

    Two LOADs of ``nbytes`` and ``2 * nbytes`` (default: a quarter and half the scratchpad, at most
    64 KiB); ``steady_fraction`` is the extra bytes over the extra cycles, as a fraction of the port's
    peak of one ``dma_bytes`` beat a cycle (start-up, fetch and the last round trip cancel out);
    ``run_fraction`` is the longer run's read beats over its cycles.
    """
    from systolica.isa import encode, make

    n = nbytes or min(cfg.spad_lines * cfg.cols // 4, 1 << 16)
    fast = FastRtl(cfg, build_root)
    runs = []
    for size in (n, 2 * n):
        words = [encode(make("LOAD", buf=0, sram=0, dram=0x1000, rows=1, lines=size // cfg.cols, stride=size)),
                 encode(make("FINISH"))]
        win = 1 << (0x1000 + size).bit_length()
        dram = np.zeros(win, np.uint8)
        dram[:32] = np.frombuffer(b"".join(w.to_bytes(16, "little") for w in words), np.uint8)
        r = fast.run(dram, window_base=0, window_size=win, prog_base=0, prog_len=2, dram_latency=latency)
        if not r.done or r.code != Fault.NONE:
            raise FastHarnessError(f"the {size}-byte LOAD ended with {r.code.name} (done={r.done})")
        runs.append(r)
    a, b = runs
    return {"config": cfg.name, "dram_latency": latency, "dma_bytes": cfg.dma_bytes, "max_burst": cfg.max_burst,
            "load_bytes": [n, 2 * n], "cycles": [a.sim_cycles, b.sim_cycles],
            "steady_fraction": n / cfg.dma_bytes / (b.sim_cycles - a.sim_cycles),
            "run_fraction": b.ports[0].rd_beats / b.sim_cycles,
            "source": "RTL (fast harness), fixed-latency DRAM model"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Fast RTL harness: cycles/s against the cocotb path; read bandwidth "
                                             "behind a DRAM latency")
    ap.add_argument("--config", default="tiny", help="preset or TOML, e.g. boards/kv260.toml (default: tiny)")
    ap.add_argument("--tiles", type=int, default=256, help="weight tiles of the benchmark program (default 256: "
                                                           "~72k cycles on tiny)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of the fast path; the best is reported")
    ap.add_argument("--pgo", action="store_true", help="--bench on the profile-guided build of the fast path "
                                                       "(built once per configuration, ~2x the build time)")
    ap.add_argument("--build-dir", default=os.environ.get("SYSTOLICA_BUILD_DIR", "build"))
    act = ap.add_mutually_exclusive_group(required=True)
    act.add_argument("--bench", action="store_true", help="fast path against the cocotb path: simulated cycles/s")
    act.add_argument("--read-bandwidth", action="store_true",
                     help="the fraction of gmem0's peak one long LOAD reaches behind --latency")
    ap.add_argument("--latency", type=int, default=100, help="DRAM latency in cycles for --read-bandwidth")
    a = ap.parse_args(argv)
    if a.read_bandwidth:
        r = read_bandwidth(load_config(a.config), Path(a.build_dir), a.latency)
        print(json.dumps(r, indent=2))
        print(f"{r['config']}: {r['steady_fraction']:.1%} of the port's peak at DRAM latency {a.latency} cycles "
              f"({r['max_burst']}-beat bursts of {r['dma_bytes']} bytes)")
        return 0
    r = bench(load_config(a.config), Path(a.build_dir), a.tiles, a.repeats, a.pgo)
    print(json.dumps(r, indent=2))
    print(format_bench(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
