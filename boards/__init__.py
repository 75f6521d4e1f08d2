"""systolica.boards: boards, deployment, and resource / timing estimates.

- :mod:`~systolica.boards.board`: board descriptions (``<board>.toml``) and their AccelConfig presets
- :mod:`~systolica.boards.ports`: port names of the top level and the AXI interfaces they form
- :mod:`~systolica.boards.vivado_ip`, :mod:`~systolica.boards.vivado`: Vivado batch TCL (IP with the
  CSR register map, block design with the Zynq PS, synthesis, implementation, .bit + .hwh)
- :mod:`~systolica.boards.hwh`: the register map of a .hwh read as PYNQ reads it
- :mod:`~systolica.boards.deploy`: the folder that goes onto the board
- :mod:`~systolica.boards.yosys`, :mod:`~systolica.boards.fit`: Yosys resource counts, fit check,
  largest array that fits
- :mod:`~systolica.boards.ecp5`: open-source Lattice ECP5 flow to a bitstream with Fmax
- :mod:`~systolica.boards.estimate`: the resource estimate behind ``systolica hw build --board X`` (the command
  itself is :mod:`systolica.cli.build`)
"""
