"""The on-chip buffers as block RAM: every memory has one write port and one read port.

A block RAM (RAMB36 / RAMB18 / URAM288 / DP16KD) has two ports; a memory with
more gets copied per read port or, with a second write port, built from
flip-flops (docs/boards.md measured that: no board fitted).  So each buffer
here is one or more *simple dual-port* memories (1 write + 1 read), and the
engines share the ports by priority, as Gemmini's scratchpad does:

- **Writes**: one write port per buffer, written to every copy of it.  The
  compute engine has priority (its pipelines never stall); a LOAD line waits
  in the load engine's line register, which holds the AXI R channel
  (``rready`` low) until the line is written.
- **Reads**: the compute engine reads operands that must arrive together
  (GEMM's activation and weight lines, ATTN's data and exponent lines, the
  two vector-buffer operands of ADD / MUL / ROPE / the norms), so the
  scratchpad is kept as two copies (``a``, ``w``) and the vector buffer as
  two (``a``, ``b``), each with its own read port.  The ops with a third
  operand line (ROPE's sin line, LAYERNORM's beta) read it through port ``b``
  the cycle after the second: at least 2 cycles a line, which costs nothing
  once the line datapath takes 2 or more beats a line.  STORE reads
  through copy ``a`` (``w`` with ``attn_beside``: :func:`store_copy`; and the
  accumulator's one read port) when compute does not: compute has priority; a
  store request that meets a compute read is lost and repeated by the store
  engine the next cycle.
- The accumulator is one memory: GEMM's read-modify-write (which forwards the sums of
  the lines it is about to write itself) and REQUANT's read share its read port; its write
  port serves the accumulator alone: its sums, GEMM's zero fill, and LOAD's lines through its second stage.

Compute readers and writers of one port never overlap (the compute engine runs
one instruction at a time), so the compute side never waits.  Copies cost
block RAM, not correctness or cycles; fewer copies need a banked placement
rule in the operand-layout contract (a later step).

:func:`memory_port_census` lists every memory of an elaborated design with its
port counts, so a test can hold the whole top level to the block-RAM rule.
"""

from __future__ import annotations

import re

from amaranth.hdl import Cat, Fragment, Module, Mux, Signal, unsigned
from amaranth.hdl._mem import MemoryInstance
from amaranth.lib import memory

from systolica.config import AccelConfig

__all__ = ["ALL_BUFFER_MEMORIES", "BUFFER_COPIES", "URAM_MIN_BITS", "build_buffers", "buffer_copies", "buffer_ports",
           "memory_port_census", "store_copy", "undefined_collisions"]

#: on UltraScale+ (``uram=True``) a buffer copy of at least this many bits is marked ``ram_style = "ultra"``:
#: a URAM288 is 4K x 72, so smaller memories waste most of it and are better in RAMB36 / RAMB18
URAM_MIN_BITS = 1 << 20

#: copies of each buffer, one per read port that compute needs at once
BUFFER_COPIES = {"spad": ("a", "w"), "acc": ("",), "vbuf": ("a", "b")}


#: every buffer memory a top level may have (the scratchpad's ``t`` copy with ``attn_beside``)
ALL_BUFFER_MEMORIES = tuple(f"{name}_{copy}_mem" if copy else f"{name}_mem"
                            for name, copies in {**BUFFER_COPIES, "spad": (*BUFFER_COPIES["spad"], "t")}.items()
                            for copy in copies)


def buffer_copies(cfg: AccelConfig) -> dict[str, tuple[str, ...]]:
    """:data:`BUFFER_COPIES` of ``cfg``: with ``attn_beside`` the scratchpad has a third copy, ``t``, the attention
    unit's (its data lines, while a GEMM_STREAM reads its activations through ``a``)."""
    if cfg.attn_beside:
        return {**BUFFER_COPIES, "spad": (*BUFFER_COPIES["spad"], "t")}
    return BUFFER_COPIES


def store_copy(cfg: AccelConfig, name: str) -> int:
    """Index (in :func:`buffer_copies`) of the copy of buffer ``name`` whose read port the STORE engine shares: the
    first, but with ``attn_beside`` the scratchpad's ``w``.  A GEMM_STREAM reads its activations through ``a``
    every cycle it has rows to feed (a prefill chunk's seven rows: every cycle of the stream), and compute has
    the port first, so a STORE through ``a`` beside it waited for the stream's end (RTL: four 4-line STOREs beside
    a 7-row stream ended ~290 cycles after it); ``w`` is read beside a stream only by ATTN's exponent lines, one
    a token."""
    return buffer_copies(cfg)[name].index("w") if cfg.attn_beside and name == "spad" else 0


def buffer_ports(cfg: AccelConfig) -> dict[str, tuple[int, int]]:
    """(address bits, data bits) of each on-chip buffer."""
    return {"spad": ((cfg.spad_lines - 1).bit_length(), cfg.cols * 8),
            "acc": ((cfg.acc_lines - 1).bit_length(), cfg.cols * 32),
            "vbuf": ((cfg.vbuf_lines - 1).bit_length(), cfg.cols * 32)}


def _first(writers):
    """(addr, data, en) of whichever of mutually exclusive requests is enabled."""
    addr, data, en = writers[-1]
    for a, d, e in reversed(writers[:-1]):
        addr, data, en = Mux(e, a, addr), Mux(e, d, data), e | en
    return addr, data, en


def build_buffers(m: Module, cfg: AccelConfig, load, comp, store, *, uram: bool = False
                  ) -> tuple[dict[str, list[memory.Memory]], Signal]:
    """Instantiate the buffers in ``m`` and wire them to the three engines; returns the memories by buffer and
    the collision flag (:func:`_collision`: a line read in the cycle it is written, seen two cycles later).

    ``uram``: the target has UltraRAM (Zynq UltraScale+, Alveo); copies of ``URAM_MIN_BITS`` or more carry
    the ``ram_style = "ultra"`` attribute that Vivado and Yosys (``synth_xilinx``) map to URAM288.
    """
    ports = buffer_ports(cfg)
    depth = {"spad": cfg.spad_lines, "acc": cfg.acc_lines, "vbuf": cfg.vbuf_lines}
    # compute-side writers of each buffer (mutually exclusive: one instruction at a time)
    cw = {
        "spad": [(comp.spad_waddr, comp.spad_wdata, comp.spad_wen)],  # QUANT
        "acc": [(comp.accum_wr.addr, comp.accum_wr.data.as_value(), comp.accum_wr.en)],  # GEMM's adder (and zero fill)
        "vbuf": [(comp.out_addr, comp.out_data, comp.out_en)],  # line-op results
    }
    # compute-side readers of each copy: (addr, en, rdata targets); STORE shares the first copy
    cr = {
        ("spad", "a"): ([(comp.a_addr, comp.a_en)], [comp.a_rdata]),
        ("spad", "w"): ([(comp.w_addr, comp.w_en)], [comp.w_rdata]),
        ("spad", "t"): ([(comp.t_addr, comp.t_en)], [comp.t_rdata]) if cfg.attn_beside else None,
        ("acc", ""): ([(comp.accum_rd.addr, comp.accum_rd.en), (comp.acc_addr, comp.acc_en)],
                      [comp.accum_rd.data, comp.acc_rdata]),
        ("vbuf", "a"): ([(comp.va_addr, comp.va_en)], [comp.va_rdata]),
        ("vbuf", "b"): ([(comp.vb_addr, comp.vb_en)], [comp.vb_rdata]),
    }
    mems: dict[str, list[memory.Memory]] = {}
    hits = []
    for name, (_, db) in ports.items():
        # the one write port: compute first, then the load engine's waiting line; the accumulator's LOAD lines go
        # through the accumulator's second stage (hw/accumulator.py), so its port has the adder alone
        c_addr, c_data, c_en = _first(cw[name])
        if name == "acc":
            m.d.comb += [comp.acc_ld_en.eq(load.acc_en), comp.acc_ld_addr.eq(load.acc_addr),
                         comp.acc_ld_data.eq(load.acc_data), load.acc_ready.eq(comp.acc_ld_ready)]
            w_addr, w_data, w_en = c_addr, c_data, c_en
        else:
            l_en = getattr(load, f"{name}_en")
            m.d.comb += getattr(load, f"{name}_ready").eq(~c_en)
            w_addr = Mux(c_en, c_addr, getattr(load, f"{name}_addr"))
            w_data = Mux(c_en, c_data, getattr(load, f"{name}_data"))
            w_en = c_en | l_en
        mems[name] = []
        s_copy = store_copy(cfg, name)
        for i, copy in enumerate(buffer_copies(cfg)[name]):
            ultra = uram and db * depth[name] >= URAM_MIN_BITS
            mem = memory.Memory(shape=unsigned(db), depth=depth[name], init=[],
                                attrs={"ram_style": "ultra"} if ultra else None)
            m.submodules[f"{name}_{copy}_mem" if copy else f"{name}_mem"] = mem
            mems[name].append(mem)
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(w_addr), wp.data.eq(w_data), wp.en.eq(w_en)]
            # the read port: compute first; STORE reads its copy (store_copy) when compute does not
            readers, targets = cr[(name, copy)]
            r_addr, _, r_en = _first([(a, 0, e) for a, e in readers])
            rp = mem.read_port()
            if i == s_copy:
                s_en = getattr(store, f"{name}_en")
                m.d.comb += [getattr(store, f"{name}_ready").eq(~r_en),
                             rp.addr.eq(Mux(r_en, r_addr, getattr(store, f"{name}_addr"))), rp.en.eq(r_en | s_en)]
            else:
                m.d.comb += [rp.addr.eq(r_addr), rp.en.eq(r_en)]
            rdata = rp.data
            # the accumulator's own read-modify-write reads lines it is about to write (it forwards their sums,
            # hw/accumulator.py): REQUANT's and STORE's reads are the ones held to the rule
            own = comp.accum_rd.en if name == "acc" else 0
            hits.append(_collision(m, rp.addr, rp.en & ~own, w_addr, w_en, f"{name}_{copy}"))
            if i == s_copy:
                m.d.comb += getattr(store, f"{name}_rdata").eq(rdata)
            m.d.comb += [t.eq(rdata) for t in targets]
    collided = Signal(name="buf_collision")
    m.d.sync += collided.eq(Cat(*hits).any())
    return mems, collided


def _collision(m: Module, r_addr, r_en, w_addr, w_en, name: str) -> Signal:
    """Whether a read (``r_addr`` when ``r_en``) was of the address written in the same cycle, a cycle later (the
    ports' enables and addresses registered first, then compared: nothing added to the buffers' address paths but
    the registers' loads).

    The buffers' read ports say nothing of a line read in the cycle it is written (:func:`undefined_collisions`:
    a block RAM's two ports answer such a read with either word, and Yosys's emulation of the old word cost a
    register and a multiplexer on every read data bit, the slowest paths of the ulx3s top level).  No program the
    compiler writes does it (a line is read before an op's result may overwrite it, and engines hand lines over
    by tokens), so the top level stops a run that does with ``BUFFER_COLLISION`` instead of computing on
    whichever word the memory gave."""
    ra, wa = Signal(len(r_addr), name=f"{name}_coll_ra"), Signal(len(r_addr), name=f"{name}_coll_wa")
    both = Signal(name=f"{name}_coll_en")
    hit = Signal(name=f"{name}_coll")
    m.d.sync += [ra.eq(r_addr), wa.eq(w_addr), both.eq(r_en & w_en), hit.eq(both & (ra == wa))]
    return hit


def undefined_collisions(il: str, memories: list[str]) -> str:
    """The RTLIL text ``il`` with the read ports of ``memories`` (MEMIDs of the top level) marked as undefined on a
    collision with a write port (``COLLISION_X_MASK`` all ones; Amaranth writes zeros, "the old word").

    A block RAM's two ports do not promise the old word when one reads the address the other writes (ECP5's
    DP16KD, Xilinx's simple dual port in write-first mode), so Yosys kept that promise with a register of the
    write data and a multiplexer on every read data bit: on ulx3s ~2,800 flip-flops and ~1,300 LUTs in the five
    buffers, on the read data's path out of every block RAM.  The design never relies on it (:func:`_collision`
    stops a run that reads a line in the cycle it is written; the accumulator's bypass decides that cycle
    itself); simulation of the Verilog still gives the old word.
    """
    want = {f'"\\\\{name}"' for name in memories}  # RTLIL escapes the name's leading backslash: "\\vbuf_a_mem"
    out, cell = [], None
    for line in il.splitlines(keepends=True):
        if cell is None:
            if line.strip().startswith("cell $memrd_v2 "):
                cell = [line]
            else:
                out.append(line)
            continue
        cell.append(line)
        if line.strip() == "end":
            text = "".join(cell)
            memid = next((ln.split()[2] for ln in cell if ln.strip().startswith("parameter \\MEMID ")), None)
            if memid in want:
                text = re.sub(r"(parameter \\COLLISION_X_MASK )(\d+)'([01]+)",
                              lambda mm: f"{mm.group(1)}{mm.group(2)}'{'1' * int(mm.group(2))}", text)
            out.append(text)
            cell = None
    return "".join(out)


def memory_port_census(top, platform=None) -> list[tuple[str, int, int, int, int, str]]:
    """Every memory of ``top`` after elaboration: (name, depth, width, write ports, read ports, ram_style).

    Elaborates the whole design (no Verilog), so it is cheap enough for the default test run.
    """
    out = []

    def walk(frag, path):
        if isinstance(frag, MemoryInstance):
            out.append((".".join(path), frag._data.depth, _width(frag), len(frag._write_ports),
                        len(frag._read_ports), str(frag._attrs.get("ram_style", ""))))
        for sub, name, _ in frag.subfragments:
            walk(sub, path + [name if isinstance(name, str) else "?"])

    walk(Fragment.get(top, platform), ["top"])
    return out


def _width(frag) -> int:
    from amaranth.hdl import Shape

    return Shape.cast(frag._data.shape).width
