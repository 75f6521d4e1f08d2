"""Baselines run on this machine with the same model and prompt: numpy, PyTorch (CPU, CUDA), llama.cpp.

Each baseline prefills the prompt (time to first token), then decodes ``n_tokens`` greedily
(decode tokens/s), with power measured or stated (:mod:`systolica.bench.power`) and an hourly
cost (:mod:`systolica.bench.costs`).  A baseline whose package or device is missing returns a
result with ``skipped`` set to the reason instead of raising, so the comparison table says why a
row is empty.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from systolica.bench.costs import CostInputs, load_costs, tokens_per_joule, usd_per_mtok
from systolica.bench.errors import BenchError
from systolica.bench.power import PowerMeter, cpu_meter, gpu_meter
from systolica.model import Model

__all__ = ["BaselineResult", "run_numpy", "run_torch", "run_llamacpp", "run_baselines", "BASELINES"]


@dataclass
class BaselineResult:
    """One system's figures for the comparison table."""

    name: str
    device: str  # "cpu", "cuda", or a board name for systolica rows
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    tokens: list[int] = field(default_factory=list)
    power_w: float | None = None
    power_source: str = ""
    usd_per_hour: float | None = None
    cost_source: str = ""
    skipped: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tokens_per_joule(self) -> float | None:
        return tokens_per_joule(self.decode_tokens_per_s, self.power_w)

    @property
    def usd_per_mtok(self) -> float | None:
        return usd_per_mtok(self.decode_tokens_per_s, self.usd_per_hour)

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_joule": self.tokens_per_joule, "usd_per_mtok": self.usd_per_mtok}


def _greedy(prefill: Callable[[list[int]], np.ndarray], step: Callable[[int], np.ndarray], prompt: Sequence[int],
            n_tokens: int, sync: Callable[[], None] = lambda: None) -> tuple[float, float | None, list[int]]:
    """(ttft_s, decode tokens/s, tokens): prefill, then ``n_tokens - 1`` decode steps."""
    t0 = time.perf_counter()
    logits = prefill(list(prompt))
    sync()
    ttft = time.perf_counter() - t0
    toks = [int(np.argmax(logits))]
    t1 = time.perf_counter()
    for _ in range(n_tokens - 1):
        toks.append(int(np.argmax(step(toks[-1]))))
    sync()
    dt = time.perf_counter() - t1
    return ttft, ((n_tokens - 1) / dt if n_tokens > 1 and dt > 0 else None), toks


def _cpu_cost(costs: CostInputs, threads: int) -> tuple[float, str]:
    return costs.cpu_core_rent.value * threads, f"{threads} cloud vCPU x ${costs.cpu_core_rent.value}/h " \
                                                 f"({costs.cpu_core_rent.source})"


def _finish(res: BaselineResult, meter: PowerMeter) -> BaselineResult:
    r = meter.reading()
    res.power_w, res.power_source = r.watts, r.source
    return res


def run_numpy(model: Model, prompt: Sequence[int], n_tokens: int, costs: CostInputs | None = None) -> BaselineResult:
    """The float reference (:class:`~systolica.reference_float.FloatModel`) in float32 numpy."""
    from systolica.reference_float import FloatModel

    costs = costs or load_costs()
    threads = os.cpu_count() or 1  # numpy's BLAS uses every core for the matrix products
    fm = FloatModel(model, np.float32)
    res = BaselineResult("numpy float32 reference", "cpu")
    res.usd_per_hour, res.cost_source = _cpu_cost(costs, threads)
    meter = cpu_meter(costs, threads)
    with meter:
        res.ttft_s, res.decode_tokens_per_s, res.tokens = _greedy(
            lambda p: fm.prefill(p)[-1], fm.decode, prompt, n_tokens)
    return _finish(res, meter)


def run_torch(model: Model, prompt: Sequence[int], n_tokens: int, device: str = "cpu",
              costs: CostInputs | None = None, batch: int = 1, threads: int | None = None) -> BaselineResult:
    """:class:`~systolica.bench.torch_model.TorchModel` on ``device`` (float32 on CPU, float16 on CUDA).

    ``threads`` sets torch's intra-op threads (default: torch's own choice, one per core); on a machine
    shared with other work, 1 thread avoids OpenMP threads spinning against each other.
    """
    costs = costs or load_costs()
    name = f"PyTorch {device}" + (f" batch {batch}" if batch > 1 else "")
    try:
        import torch
    except ImportError:
        return BaselineResult(name, device, skipped="torch is not installed (pip install torch, extra 'gpu')")
    if device == "cuda" and not torch.cuda.is_available():
        return BaselineResult(name, device, skipped="no CUDA device (torch.cuda.is_available() is False)")
    from systolica.bench.torch_model import TorchModel

    if threads:
        torch.set_num_threads(int(threads))
    dtype = "float16" if device == "cuda" else "float32"
    tm = TorchModel(model, device, dtype, max_seq=len(prompt) + n_tokens + 1, batch=batch)
    res = BaselineResult(name, device, extra={"dtype": dtype, "batch": batch, "torch": torch.__version__})
    if device == "cuda":
        gpu = torch.cuda.get_device_name(0)
        res.extra["gpu"] = gpu
        f = costs.gpu_rent_for(gpu)
        res.usd_per_hour, res.cost_source = f.value, f"{gpu} rental ({f.source})"
        meter = gpu_meter(costs, gpu)
    else:
        threads = torch.get_num_threads()
        res.usd_per_hour, res.cost_source = _cpu_cost(costs, threads)
        meter = cpu_meter(costs, threads)

    def logits(x):
        return x.float().cpu().numpy()[0]

    with torch.inference_mode(), meter:
        for _ in range(2):  # warm-up: the first calls of each shape pay for kernel selection and allocation
            tm.reset()
            tm.forward([list(prompt)] * batch)
            tm.forward([[0]] * batch)
        tm.reset()
        tm.sync()
        res.ttft_s, tps, res.tokens = _greedy(
            lambda p: logits(tm.forward([p] * batch)), lambda t: logits(tm.forward([[t]] * batch)),
            prompt, n_tokens, tm.sync)
    res.decode_tokens_per_s = tps * batch if tps else None  # every sequence of the batch makes a token a step
    return _finish(res, meter)


def run_llamacpp(gguf_path: str | None, prompt: Sequence[int], n_tokens: int,
                 costs: CostInputs | None = None, threads: int | None = None) -> BaselineResult:
    """llama.cpp through ``llama-cpp-python`` on the CPU (GGUF checkpoints only; its own quantization)."""
    costs = costs or load_costs()
    name = "llama.cpp (CPU)"
    if gguf_path is None:
        return BaselineResult(name, "cpu", skipped="llama.cpp needs a GGUF checkpoint; the model is not one")
    try:
        from llama_cpp import Llama
    except ImportError:
        return BaselineResult(name, "cpu", skipped="llama-cpp-python is not installed (pip install "
                                                   "llama-cpp-python; builds llama.cpp, ~10 min on 2 cores)")
    threads = threads or os.cpu_count() or 1
    llm = Llama(model_path=str(gguf_path), n_ctx=len(prompt) + n_tokens + 8, n_threads=threads, verbose=False,
                logits_all=False)
    res = BaselineResult(name, "cpu", extra={"threads": threads})
    res.usd_per_hour, res.cost_source = _cpu_cost(costs, threads)
    meter = cpu_meter(costs, threads)

    def prefill(p):
        llm.reset()
        llm.eval(p)
        return np.asarray(llm.scores[llm.n_tokens - 1])

    def step(t):
        llm.eval([t])
        return np.asarray(llm.scores[llm.n_tokens - 1])

    with meter:
        res.ttft_s, res.decode_tokens_per_s, res.tokens = _greedy(prefill, step, prompt, n_tokens)
    return _finish(res, meter)


def run_golden(model: Model, prompt: Sequence[int], n_tokens: int, costs: CostInputs | None = None) -> BaselineResult:
    """The bit-exact golden simulator's own host speed: the model compiled for the ``default`` 8x8 config and
    run on :class:`~systolica.driver.golden_device.GoldenDevice` (no cycle model), on one core of this host.

    This is how fast a user can *simulate* the accelerator here, not an accelerator figure.
    """
    from systolica.compiler.compile import compile_model
    from systolica.compiler.kv_page import page_and_context
    from systolica.config import preset
    from systolica.driver.golden_device import GoldenDevice
    from systolica.driver.runtime import Runtime

    costs = costs or load_costs()
    cfg = preset("default")
    _, max_seq = page_and_context(cfg, model.config, len(prompt) + n_tokens + 2)
    art = compile_model(model, cfg, max_seq=max_seq, prefill_chunk=16)  # the page the compiler chooses
    rt = Runtime(art, GoldenDevice(cfg, dram_bytes=-(-art.dram_bytes // 4096) * 4096 + 4096), timeout_s=1e6)
    seq = rt.new_sequence()
    res = BaselineResult("golden simulator (host)", "cpu")
    res.usd_per_hour, res.cost_source = _cpu_cost(costs, 1)
    meter = cpu_meter(costs, 1)
    with meter:
        res.ttft_s, res.decode_tokens_per_s, res.tokens = _greedy(
            lambda p: rt.prefill(seq, p)[0], lambda t: rt.decode(seq, t)[0], prompt, n_tokens)
    seq.release()
    res.extra["note"] = "bit-exact ISA simulation of the default 8x8 config on this host (not an accelerator figure)"
    return _finish(res, meter)


BASELINES = ("numpy", "torch-cpu", "torch-cuda", "llama.cpp", "golden")


def run_baselines(model: Model, prompt: Sequence[int], n_tokens: int, which: Sequence[str] = BASELINES,
                  gguf_path: str | None = None, costs: CostInputs | None = None,
                  threads: int | None = None) -> list[BaselineResult]:
    """Run the named baselines (see :data:`BASELINES`) in order."""
    unknown = sorted(set(which) - set(BASELINES))
    if unknown:
        raise BenchError(f"unknown baseline(s) {', '.join(unknown)}; choose from {', '.join(BASELINES)}")
    out = []
    for b in which:
        if b == "numpy":
            out.append(run_numpy(model, prompt, n_tokens, costs))
        elif b == "torch-cpu":
            out.append(run_torch(model, prompt, n_tokens, "cpu", costs, threads=threads))
        elif b == "torch-cuda":
            out.append(run_torch(model, prompt, n_tokens, "cuda", costs))
        elif b == "golden":
            out.append(run_golden(model, prompt, n_tokens, costs))
        else:
            out.append(run_llamacpp(gguf_path, prompt, n_tokens, costs, threads))
    return out
