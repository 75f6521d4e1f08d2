"""The deploy folder: what goes onto the board and how to run it there.

Layout (the ``pynq`` backend loads ``<board>.bit`` and reads ``<board>.hwh``
beside it; ``systolica run`` compiles the model for ``config.toml`` and caches it)::

    deploy/
      <board>.bit        written by Vivado (build.tcl), absent until then
      <board>.hwh        Vivado's hardware handoff: addresses, register map, clocks
      config.toml        the accelerator configuration the bitstream was built from
      regmap.md          the register map, for people
      model/             the model slot: put one .gguf (or a safetensors folder) here
      run.sh             runs `systolica run --backend pynq` on the board
      README.md
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from systolica.boards.board import Board
from systolica.config import AccelConfig

__all__ = ["DeployError", "deploy_files", "write_deploy", "check_deploy"]


class DeployError(ValueError):
    """A deploy folder that lacks what the board needs."""


def deploy_files(board: Board) -> dict[str, str]:
    """Role -> file name inside the deploy folder."""
    bit = f"{board.name}.xclbin" if board.flow == "alveo" else f"{board.name}.bit"
    if board.flow == "ecp5":  # no processor to run the driver on: a measurement bitstream only
        return {"bitstream": bit, "config": "config.toml", "regmap": "regmap.md", "readme": "README.md"}
    files = {"bitstream": bit, "config": "config.toml", "regmap": "regmap.md", "run": "run.sh",
             "readme": "README.md", "model": "model"}
    if board.flow != "alveo":
        files["hwh"] = f"{board.name}.hwh"
    return files


def _run_sh(board: Board, files: dict[str, str]) -> str:
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# Generate text with the systolica accelerator on a {board.title}.",
        "# On the board (PYNQ image; root is needed for the FPGA manager):",
        '#   sudo -E ./run.sh "Once upon a time" -n 64',
        "# Extra arguments go to `systolica run` (see `systolica run --help`).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        'MODEL="${MODEL:-}"',
        'if [ -z "$MODEL" ]; then',
        "    for m in model/*.gguf model/*/config.json; do",
        '        if [ -e "$m" ]; then MODEL="${m%/config.json}"; break; fi',
        "    done",
        "fi",
        f'exec systolica run --backend pynq --bitstream {files["bitstream"]} --config {files["config"]} '
        '--model "${MODEL:-default}" "$@"',
        "",
    ])


def _readme_ecp5(board: Board, cfg: AccelConfig, files: dict[str, str]) -> str:
    return "\n".join([
        f"# systolica on {board.title}", "",
        f"Accelerator `{cfg.name}`: {cfg.rows}x{cfg.cols} int8 array, config hash `{cfg.hash32():08x}`.", "",
        f"`systolica hw build --board {board.name} --pnr` places and routes the accelerator with the open-source "
        f"ECP5 flow and writes `{files['bitstream']}` with its Fmax. That bitstream wraps the accelerator's AXI "
        "ports in shift registers to measure timing and resources; it is not a working board design. The board "
        "has no processor for the systolica driver: running models on it needs a host bridge (e.g. USB-UART to "
        "AXI-Lite) and a DRAM controller, which systolica does not provide. Use a Zynq or Kria board to run models.",
        ""])


def _readme(board: Board, cfg: AccelConfig, files: dict[str, str]) -> str:
    bits = f"`{files['bitstream']}`" + (f" and `{files['hwh']}`" if "hwh" in files else "")
    if board.flow == "alveo":
        build = ("In the build folder, with Vivado and Vitis installed: `vivado -mode batch -source build.tcl` "
                 "packages the RTL kernel (`systolica_accel.xo`), then `./link.sh` links it into "
                 f"`deploy/{files['bitstream']}` (set `PLATFORM` to the installed shell). PYNQ 3.1 deprecated "
                 "Alveo support: use PYNQ <= 3.0 on the host.")
    else:
        build = ("In the build folder, where Vivado is installed (2020.2 or newer):\n\n"
                 "    vivado -mode batch -source build.tcl\n\n"
                 f"It packages the accelerator as IP, builds the block design around the {board.part} "
                 "processing system, runs synthesis and implementation (about 20-60 minutes) and writes "
                 f"{bits} into this folder. `systolica hw build --board {board.name} --vivado` does the same "
                 "and then checks the .hwh register map against the CSR map.")
    return "\n".join([
        f"# systolica on {board.title}",
        "",
        f"Accelerator `{cfg.name}`: {cfg.rows}x{cfg.cols} int8 array, {cfg.dma_ports} x {cfg.dma_bits}-bit "
        f"AXI port(s), {cfg.clock_mhz:g} MHz, config hash `{cfg.hash32():08x}` (the ID register reports it; "
        "a model compiled for another config is refused).",
        "",
        "## 1. Build the bitstream", "", build, "",
        "## 2. Copy to the board", "",
        f"Copy this folder to the board (e.g. `scp -r deploy xilinx@<board>:systolica`). It needs {bits}, "
        f"`{files['config']}` and `{files['run']}`; install systolica there (`pip install systolica`, "
        "Python 3.10 and numpy 1.x on PYNQ 3.x images are fine).",
        "",
        "## 3. Run", "",
        f"Put a model in `{files['model']}/` (a llama-family .gguf or a safetensors folder; without one "
        "`systolica run` uses its default model), then on the board:",
        "",
        '    sudo -E ./run.sh "Once upon a time" -n 64',
        "",
        "The first run compiles the model for this configuration and caches the artifact.",
        "",
    ])


def write_deploy(board: Board, cfg: AccelConfig, out_dir: str | Path, *, regmap_md: str | Path | None = None
                 ) -> dict[str, Path]:
    """Create the deploy folder (everything but the Vivado outputs); return role -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = deploy_files(board)
    cfg.save(out / files["config"])
    if regmap_md is not None:
        shutil.copyfile(regmap_md, out / files["regmap"])
    if board.flow == "ecp5":
        (out / files["readme"]).write_text(_readme_ecp5(board, cfg, files))
        return {role: out / name for role, name in files.items()}
    (out / files["model"]).mkdir(exist_ok=True)
    (out / files["model"] / "README.txt").write_text(
        "Put one model here: a llama-family .gguf file or a safetensors folder (config.json + *.safetensors).\n")
    run = out / files["run"]
    run.write_text(_run_sh(board, files))
    run.chmod(run.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (out / files["readme"]).write_text(_readme(board, cfg, files))
    return {role: out / name for role, name in files.items()}


def check_deploy(board: Board, deploy_dir: str | Path, cfg: AccelConfig) -> list[str]:
    """Files the board still needs from the deploy folder (empty: ready to copy).

    Raises
    ------
    DeployError
        If the folder's ``config.toml`` is not ``cfg``, or its ``.hwh`` has a register
        map other than the CSR map.
    """
    d = Path(deploy_dir)
    files = deploy_files(board)
    missing = [name for role, name in files.items() if not (d / name).exists()]
    cfg_file = d / files["config"]
    if cfg_file.exists():
        have = AccelConfig.load(cfg_file)
        if have.hash32() != cfg.hash32():
            raise DeployError(f"{cfg_file} is config {have.hash32():08x}, the build is for {cfg.hash32():08x}: "
                              "rebuild the deploy folder")
    hwh = d / files.get("hwh", "")
    if "hwh" in files and hwh.exists() and hwh.stat().st_size > 0:
        from systolica.boards.hwh import HwhError, check_hwh

        try:
            check_hwh(hwh)
        except HwhError as e:
            raise DeployError(f"{hwh}: {e}") from None
    return missing
