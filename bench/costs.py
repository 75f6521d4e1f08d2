"""Energy and money per token: the inputs (``costs.json``, every figure with its source) and the arithmetic.

Tokens per joule is decode tokens/s divided by the power drawn while decoding; dollars per
million tokens is what an hour of the system costs divided by the tokens it makes in an hour.
An hour of a board is its price amortized over ``amortization_years`` of round-the-clock use plus
its electricity; an hour of a GPU is its rental price; an hour of CPU cores is their cloud price.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["Figure", "CostInputs", "load_costs", "tokens_per_joule", "usd_per_mtok", "board_usd_per_hour"]

COSTS_FILE = Path(__file__).with_name("costs.json")
_HOURS_PER_YEAR = 24 * 365


@dataclass(frozen=True)
class Figure:
    """A number and where it comes from."""

    value: float
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


class CostInputs:
    """The parsed ``costs.json``."""

    def __init__(self, data: dict, source: str = "costs.json"):
        def fig(d: dict, where: str) -> Figure:
            try:
                v = float(d["value"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{source}: {where} needs a numeric 'value', got {d!r}") from None
            if v < 0:
                raise ValueError(f"{source}: {where} value={v} must be >= 0")
            return Figure(v, str(d.get("source", "")))

        try:
            self.electricity = fig(data["electricity_usd_per_kwh"], "electricity_usd_per_kwh")
            self.amortization_years = fig(data["amortization_years"], "amortization_years")
            self.gpu_rent = {k: fig(v, f"gpu_rental_usd_per_hour.{k}") for k, v in data["gpu_rental_usd_per_hour"].items()}
            self.gpu_power = {k: fig(v, f"gpu_power_w.{k}") for k, v in data["gpu_power_w"].items()}
            self.cpu_core_rent = fig(data["cpu_core_usd_per_hour"], "cpu_core_usd_per_hour")
            self.cpu_core_power = fig(data["cpu_core_power_w"], "cpu_core_power_w")
            self.gpu_sheets = {k: {f: fig(v[f], f"gpu_datasheet.{k}.{f}") for f in ("hbm_gbps", "fp16_tflops")}
                               for k, v in data.get("gpu_datasheet", {}).items()}
        except KeyError as e:
            raise ValueError(f"{source}: missing {e.args[0]!r}") from None
        if self.amortization_years.value <= 0:
            raise ValueError(f"{source}: amortization_years must be positive")

    @staticmethod
    def _match(table: dict[str, Figure], gpu_name: str) -> Figure:
        for key, f in table.items():
            if key != "default" and key.lower() in gpu_name.lower():
                return f
        return table["default"]

    def gpu_rent_for(self, gpu_name: str) -> Figure:
        """Rental $/h of the GPU whose name contains a key of the table (``"NVIDIA H200"`` -> H200)."""
        return self._match(self.gpu_rent, gpu_name)

    def gpu_power_for(self, gpu_name: str) -> Figure:
        return self._match(self.gpu_power, gpu_name)

    def gpu_datasheet(self, gpu_name: str) -> dict[str, Figure]:
        """HBM bandwidth (GB/s) and dense fp16 tensor throughput (TFLOP/s) of a GPU, for projections."""
        for key, sheet in self.gpu_sheets.items():
            if key.lower() in gpu_name.lower():
                return sheet
        raise ValueError(f"no datasheet figures for GPU {gpu_name!r} in costs.json (gpu_datasheet: "
                         f"{', '.join(self.gpu_sheets) or 'none'})")


@lru_cache(maxsize=4)
def load_costs(path: str | None = None) -> CostInputs:
    """The cost inputs from ``path`` (default: ``bench/costs.json`` beside this module)."""
    p = Path(path) if path else COSTS_FILE
    return CostInputs(json.loads(p.read_text()), source=str(p))


def tokens_per_joule(tokens_per_s: float | None, power_w: float | None) -> float | None:
    if not tokens_per_s or not power_w:
        return None
    return tokens_per_s / power_w


def usd_per_mtok(tokens_per_s: float | None, usd_per_hour: float | None) -> float | None:
    """Dollars per million tokens at a sustained ``tokens_per_s``."""
    if not tokens_per_s or usd_per_hour is None:
        return None
    return usd_per_hour / (tokens_per_s * 3600) * 1e6


def board_usd_per_hour(price_usd: float, power_w: float, costs: CostInputs) -> float:
    """Price amortized over the years of round-the-clock use, plus the electricity of an hour."""
    capital = price_usd / (costs.amortization_years.value * _HOURS_PER_YEAR)
    return capital + power_w / 1000 * costs.electricity.value
