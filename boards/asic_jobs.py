"""Parallel Yosys for the ASIC estimate (:mod:`systolica.boards.asic`): the modules of the hierarchy synthesized
and mapped in separate processes, then stitched into one mapped netlist.

The ASIC flow keeps the hierarchy (no ``-flatten``), and every pass of ``synth``, ``dfflibmap`` and ``abc``
works on one module at a time, so a module maps the same whether the rest of the design is beside it or is a
black box with the same ports.  Each job therefore reads the whole RTLIL, turns the modules it does not own
into black boxes (``blackbox``: ports kept) and synthesizes its own; :func:`plan_jobs` deals the modules out
largest first (RTLIL lines plus a rough gate count of the wide cells as the measure of work) and :func:`run_jobs` runs the jobs ``jobs`` at a time.
The stitch step (:func:`stitch_script`) reads every job's mapped modules into one design, checks that no module
is missing, and writes the ``stat.json`` and ``netlist.v`` that one serial run would have written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["module_sizes", "plan_jobs", "job_script", "stitch_script", "Job", "run_jobs", "default_jobs"]


def default_jobs() -> int:
    """One Yosys process per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_SHIFTS = ("$shl", "$shr", "$sshl", "$sshr", "$shift", "$shiftx")


def _cell_work(cell: str, p: dict[str, Any], mems: dict[str, tuple[int, int]], macros: set[str]) -> int:
    """Generic gates a cell becomes, roughly: what ABC's time follows (RTLIL lines do not see a 32 x 32
    multiplier or a flip-flop memory's read multiplexers)."""
    def g(k: str) -> int:
        v = p.get(k, 1)
        return v if isinstance(v, int) else 1

    if cell in ("$mul", "$div", "$mod", "$divfloor", "$modfloor"):
        return g("A_WIDTH") * g("B_WIDTH")
    if cell in _SHIFTS:
        return g("Y_WIDTH") * g("B_WIDTH")
    if cell == "$pmux":
        return g("WIDTH") * g("S_WIDTH")
    if cell in ("$memrd_v2", "$memrd", "$memwr_v2", "$memwr"):
        memid = str(p.get("MEMID", "")).lstrip("\\")
        if memid in macros:
            return 1
        width, depth = mems.get(memid, (g("WIDTH"), 1))
        return width * depth
    for k in ("Y_WIDTH", "WIDTH", "A_WIDTH"):
        if k in p:
            return g(k)
    return 1


def module_sizes(il: str, macros: Sequence[tuple[str, str]] = ()) -> dict[str, int]:
    """RTLIL module name -> the planner's estimate of its synthesis work: its RTLIL lines (what Yosys's passes
    follow) plus :func:`_cell_work` of its cells (what ABC follows); ``macros``: (module, memory) pairs that
    are SRAM macros, not logic."""
    boxed = {}
    for m, n in macros:
        boxed.setdefault(m, set()).add(n)
    sizes: dict[str, int] = {}
    name, n, work = None, 0, 0
    mems: dict[str, tuple[int, int]] = {}
    cell, params = None, {}
    for line in il.splitlines():
        if line.startswith("module "):
            name, n, work, mems = line.split()[1].lstrip("\\"), 0, 0, {}
        elif line == "end" and name is not None:
            sizes[name] = n + work
            name = None
        elif line.startswith("  memory "):
            t = line.split()
            mems[t[-1].lstrip("\\")] = (int(t[t.index("width") + 1]), int(t[t.index("size") + 1]))
        elif line.startswith("  cell "):
            cell, params = line.split()[1], {}
        elif cell is not None and line.startswith("    parameter "):
            t = line.split(None, 2)
            v = t[2].strip() if len(t) > 2 else ""
            params[t[1].lstrip("\\")] = v.strip('"') if t[1] == "\\MEMID" else (int(v) if v.isdigit() else v)
        elif cell is not None and line == "  end":
            work += _cell_work(cell, params, mems, boxed.get(name, set()))
            cell = None
        n += 1
    return sizes


def plan_jobs(sizes: dict[str, int], jobs: int, *, per_worker: int = 3) -> list[list[str]]:
    """Deal the modules into at most ``jobs * per_worker`` groups, largest module first into the lightest group
    (LPT), so that the big modules run alone and the small ones share a process; the groups come heaviest first
    (the order a pool of ``jobs`` workers should start them in)."""
    if jobs <= 1 or len(sizes) <= 1:
        return [sorted(sizes)] if sizes else []
    n = min(len(sizes), jobs * per_worker)
    bins: list[tuple[int, list[str]]] = [(0, []) for _ in range(n)]
    for name in sorted(sizes, key=lambda k: (-sizes[k], k)):
        i = min(range(n), key=lambda j: (bins[j][0], j))
        bins[i] = (bins[i][0] + sizes[name], bins[i][1] + [name])
    return [sorted(b) for w, b in sorted(bins, key=lambda b: -b[0]) if b]


def _names(mods: Sequence[str]) -> str:
    return " ".join(mods)


def job_script(il_name: str, top: str, own: Sequence[str], others: Sequence[str], liberty: str, period_ps: int,
               macros: Sequence[str], *, sram_cell: str, abc_script: str, booth: bool = False) -> str:
    """The Yosys script of one job: synthesize and map the modules ``own`` of the design in ``il_name``, the
    ``others`` as black boxes; ``macros`` (``module/memory``) become ``sram_cell``.  Writes ``mapped.il`` (the
    job's modules only) and ``stat.json`` (``stat -liberty`` of each)."""
    lines = [f"read_rtlil {il_name}", f"hierarchy -check -top {top}"]
    if others:
        lines.append(f"blackbox {_names(others)}")
    lines.append("synth -run coarse:fine" + (" -booth" if booth else ""))
    if macros:
        lines.append(f"chtype -set {sram_cell} " + " ".join(macros))
    lines += ["synth -run fine:check -noabc",
              f"dfflibmap -liberty {liberty}",
              f"abc -D {period_ps} -liberty {liberty} -script {abc_script}",
              "opt_clean",
              "hilomap -hicell LOGIC1_X1 Z -locell LOGIC0_X1 Z",
              "setundef -zero",
              "opt_clean -purge"]
    if others:
        lines.append(f"delete {_names(others)}")
    lines += [f"tee -q -o stat.json stat -liberty {liberty} -json", "write_rtlil mapped.il"]
    return "\n".join(lines) + "\n"


def stitch_script(mapped: Sequence[str], top: str, liberty: str) -> str:
    """Yosys: the jobs' mapped modules as one design; ``stat.json`` of the whole hierarchy and ``netlist.v``."""
    return "\n".join([*(f"read_rtlil {m}" for m in mapped),
                      f"hierarchy -top {top}",
                      "tee -q -o modules.txt ls",
                      f"tee -q -o stat.json stat -liberty {liberty} -json -top {top}",
                      # -simple-lhs: no `assign {a, b} = ...` (Debian 12's OpenSTA stops at a concatenation on the left)
                      "write_verilog -noattr -noexpr -nohex -nodec -simple-lhs netlist.v"]) + "\n"


@dataclass
class Job:
    """One Yosys process: the modules it owns, its folder, and how long it took."""

    index: int
    modules: list[str]
    work: int  # the planner's estimate (module_sizes)
    folder: Path
    seconds: float | None = None
    stat: dict[str, Any] = field(default_factory=dict)

    def label(self, top: str) -> str:
        short = [m[len(top):].lstrip(".") or top if m.startswith(top) else m for m in self.modules]
        return ", ".join(short[:3]) + (f" (+{len(short) - 3} more)" if len(short) > 3 else "")


def _link_or_copy(src: Path, dst: Path) -> None:
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


class _Procs:
    """The running Yosys processes, so that one failing (or Ctrl-C) stops the others instead of waiting for them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopped = False

    def run(self, folder: Path, timeout: float) -> None:
        from systolica.boards.yosys import YosysError, yosys_command

        with self.lock:
            if self.stopped:
                raise YosysError("stopped: another Yosys job failed")
            proc = subprocess.Popen(yosys_command() + ["-q", "-l", "yosys.log", "-s", "run.ys"], cwd=folder,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.procs.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise YosysError(f"Yosys did not finish in the time left ({timeout:.0f} s; script {folder / 'run.ys'})"
                             ) from None
        finally:
            with self.lock:
                self.procs.discard(proc)
        if proc.returncode != 0:
            log = (folder / "yosys.log").read_text(errors="replace") if (folder / "yosys.log").exists() else ""
            tail = "\n".join((log or out or "").splitlines()[-15:])
            raise YosysError(f"Yosys failed (exit {proc.returncode}) in {folder}:\n{tail}")

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for p in self.procs:
                p.kill()


def run_jobs(il_path: Path, top: str, plan: list[list[str]], sizes: dict[str, int], liberty: Path, period_ps: int,
             macros: Sequence[tuple[str, str]], wd: Path, *, jobs: int, sram_cell: str, abc_script: str, booth: bool = False, timeout: float = 3600,
             say: Callable[[str], None] = lambda s: None, heartbeat: float = 60.0) -> tuple[list[Job], str]:
    """Run the planned jobs ``jobs`` at a time (each in ``wd/jobs/NN``), largest first; return the jobs (with
    their time and ``stat -liberty`` per module) and their logs joined.  ``macros``: (module, memory) pairs."""
    everything = sorted(sizes)
    todo = []
    for i, mods in enumerate(plan):
        folder = wd / "jobs" / f"{i:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        _link_or_copy(il_path, folder / "design.il")
        _link_or_copy(liberty, folder / "stdcells.lib")
        own = set(mods)
        mine = [f"{m}/{n}" for m, n in macros if m in own]
        (folder / "run.ys").write_text(job_script("design.il", top, mods, [m for m in everything if m not in own],
                                                  "stdcells.lib", period_ps, mine, sram_cell=sram_cell,
                                                  abc_script=abc_script, booth=booth))
        todo.append(Job(i, list(mods), sum(sizes[m] for m in mods), folder))
    t0 = time.monotonic()
    deadline = t0 + timeout
    started: dict[int, float] = {}
    lock = threading.Lock()
    procs = _Procs()
    said = threading.Lock()

    def log(text: str) -> None:  # one line at a time from the worker threads
        with said:
            say(text)

    def one(job: Job) -> Job:
        with lock:
            started[job.index] = time.monotonic()
        log(f"Yosys job {job.index + 1}/{len(todo)} started: {job.label(top)} (work estimate {job.work:,})")
        left = max(1.0, deadline - time.monotonic())
        procs.run(job.folder, left)
        job.seconds = round(time.monotonic() - started[job.index], 1)
        job.stat = json.loads((job.folder / "stat.json").read_text())
        return job

    done: list[Job] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending = {pool.submit(one, j) for j in todo}
        try:
            while pending:
                finished, pending = wait(pending, timeout=heartbeat, return_when=FIRST_COMPLETED)
                for f in finished:
                    job = f.result()  # a failed job raises here: the rest are cancelled below
                    done.append(job)
                    log(f"Yosys job {job.index + 1}/{len(todo)} done in {job.seconds:.0f} s: {job.label(top)} "
                        f"({len(done)}/{len(todo)} done, {time.monotonic() - t0:.0f} s elapsed)")
                if pending and not finished:
                    now = time.monotonic()
                    with lock:
                        running = [(todo[i], now - s) for i, s in started.items()
                                   if all(d.index != i for d in done)]
                    log(f"Yosys: {len(done)}/{len(todo)} jobs done, {now - t0:.0f} s elapsed; running: " +
                        "; ".join(f"{j.label(top)} ({s:.0f} s)" for j, s in running))
        except BaseException:
            for f in pending:
                f.cancel()
            procs.stop()
            raise
    done.sort(key=lambda j: j.index)
    logs = "\n".join((j.folder / "yosys.log").read_text(errors="replace") for j in done
                     if (j.folder / "yosys.log").exists())
    return done, logs


def stat_modules(stat: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``stat -json``'s modules without Yosys's leading backslash."""
    return {re.sub(r"^\\", "", k): v for k, v in stat.get("modules", {}).items()}
