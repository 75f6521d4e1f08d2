"""AXI4 and AXI4-Lite signatures with the flat, lower-case member names of the AXI specification.

Members are named exactly as the AXI channels name their signals (``awaddr``,
``wdata``, ...), so a top-level port ``<prefix>_<member>`` is what Vivado's IP
packager infers as an AXI interface.  Directions are those of the *manager*
(master); a subordinate (slave) uses ``.flip()``.

Only the signals the accelerator needs are present: 1-bit IDs (always 0, so
responses arrive in order), no ``*cache``/``*prot``/``*lock``/``*qos`` (the packager and the
interconnect fill in defaults).
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["axi4_lite_signature", "axi4_signature", "axi4_read_signature", "axi4_write_signature",
           "AXI_LITE_NAMES", "AXI4_NAMES", "BURST_INCR", "connect_flat"]

BURST_INCR = 0b01  # AXI INCR burst: the only kind the DMA issues


def axi4_lite_signature(addr_width: int = 32, data_width: int = 32) -> wiring.Signature:
    """AXI4-Lite manager signature (flip it for the subordinate side)."""
    if data_width not in (32, 64):
        raise ValueError(f"AXI4-Lite data width must be 32 or 64, not {data_width}")
    return wiring.Signature({
        "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
        "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
        "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
    })


def axi4_signature(addr_width: int = 64, data_width: int = 64, id_width: int = 1) -> wiring.Signature:
    """AXI4 (full) manager signature with bursts; 8-bit ``axlen`` (up to 256 beats).

    The manager drives ID 0 on every request (responses then come back in order);
    the 1-bit ID ports are there because bus models and HLS-style IP expect them.
    """
    if data_width not in (32, 64, 128, 256, 512):
        raise ValueError(f"AXI4 data width must be one of 32, 64, 128, 256, 512, not {data_width}")
    return wiring.Signature({
        "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3), "awburst": Out(2),
        "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
        "wvalid": Out(1), "wready": In(1),
        "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3), "arburst": Out(2),
        "arvalid": Out(1), "arready": In(1),
        "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1), "rvalid": In(1), "rready": Out(1),
    })


def axi4_read_signature(addr_width: int = 64, data_width: int = 64) -> wiring.Signature:
    """The AR and R channels of :func:`axi4_signature` (a read-only manager)."""
    full = axi4_signature(addr_width, data_width).members
    return wiring.Signature({k: v for k, v in full.items() if k.startswith(("ar", "r"))})


def axi4_write_signature(addr_width: int = 64, data_width: int = 64) -> wiring.Signature:
    """The AW, W and B channels of :func:`axi4_signature` (a write-only manager)."""
    full = axi4_signature(addr_width, data_width).members
    return wiring.Signature({k: v for k, v in full.items() if k.startswith(("aw", "w", "b"))})


AXI_LITE_NAMES = tuple(axi4_lite_signature().members)
AXI4_NAMES = tuple(axi4_signature().members)


def connect_flat(m, top, prefix: str, inner, signature: wiring.Signature, *, manager: bool) -> None:
    """Wire an interface object ``inner`` to flat top-level ports ``top.<prefix>_<member>``.

    Amaranth 0.5 would name the ports of a nested interface ``<prefix>__<member>``;
    flat top-level members give exactly the AXI names the FPGA tools expect.
    ``manager`` is True when ``inner`` drives the manager side (an AXI master port).
    """
    for name, member in signature.members.items():
        port = getattr(top, f"{prefix}_{name}")
        sig = getattr(inner, name)
        drives_out = (member.flow == wiring.Out) == manager
        if drives_out:
            m.d.comb += port.eq(sig)
        else:
            m.d.comb += sig.eq(port)
