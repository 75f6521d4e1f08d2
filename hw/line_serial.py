"""The line serializer: ``cols``-wide buffer lines to beats of ``L`` lanes for the line units, and back.

The buffers hand over a whole line per read (``cols`` lanes); the line units have
``L = cfg.line_width`` lanes (:mod:`~systolica.hw.line_unit`), so each line goes through them
in ``B = cols / L`` beats, lanes ``k*L .. k*L + L - 1`` in beat ``k``.  Both directions are
shift registers of ``B - 1`` beats (a 2:1 multiplexer per bit, no ``B``-way selection):

* :func:`serialize`: in the cycle a line is *loaded* (its read data are on the port), beat 0 goes
  out straight from the port and the other ``B - 1`` beats into the register, which shifts one
  beat per cycle; the next line may load once ``B`` cycles have passed.
* :func:`gather`: output beats shift in; the ``B``-th completes the line, which is the register
  and that beat side by side (a line is written the cycle its last beat appears).

With ``B = 1`` both are wires: the units see whole lines, as before the line width was a parameter.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value

__all__ = ["serialize", "gather", "hold", "serialize_two_rates"]


def serialize(m: Module, load, lines: list[Value], beat_bits: list[int], beats: int, name: str, clear=0):
    """Cut ``lines`` (loaded together when ``load`` is high) into ``beats`` beats each.

    ``lines[j]`` is ``beats * beat_bits[j]`` bits wide.  Returns ``(out, active, first, last)``: the
    current beat of each line, high while a beat is out (the ``load`` cycle and the ``beats - 1``
    after it), and whether it is beat 0 / beat ``beats - 1``.  ``load`` must not rise again
    before the previous line's beats are out; ``clear`` drops the beats still held.
    """
    if beats == 1:
        return list(lines), load, Const(1, 1), Const(1, 1)
    active, last = _beats_out(m, load, beats, name, clear)
    first = Signal(name=f"{name}_first")
    m.d.comb += first.eq(load)
    out = []
    for j, (line, wb) in enumerate(zip(lines, beat_bits, strict=True)):
        assert len(line) == beats * wb, (name, j, len(line), beats, wb)
        reg = Signal((beats - 1) * wb, name=f"{name}_sr{j}", reset_less=True)
        with m.If(load):
            m.d.sync += reg.eq(line[wb:])
        with m.Else():
            m.d.sync += reg.eq(reg >> wb)
        beat = Signal(wb, name=f"{name}_beat{j}")
        m.d.comb += beat.eq(Mux(load, line[:wb], reg[:wb]))
        out.append(beat)
    return out, active, first, last


def _beats_out(m: Module, load, beats: int, name: str, clear=0):
    """``(active, last)`` of a line's ``beats`` beats from its ``load`` cycle on: a count of the beats still in the
    register; ``clear`` drops them."""
    cnt = Signal(range(beats), name=f"{name}_left")  # beats still in the register
    with m.If(load):
        m.d.sync += cnt.eq(beats - 1)
    with m.Elif(cnt != 0):
        m.d.sync += cnt.eq(cnt - 1)
    with m.If(clear):
        m.d.sync += cnt.eq(0)
    active, last = Signal(name=f"{name}_active"), Signal(name=f"{name}_last")
    m.d.comb += [active.eq(load | (cnt != 0)), last.eq(~load & (cnt == 1))]
    return active, last


def hold(m: Module, load, value: Value, name: str) -> Value:
    """``value`` in the ``load`` cycle, and the value of that cycle afterwards (per-line side data)."""
    reg = Signal(len(value), name=name, reset_less=True)
    with m.If(load):
        m.d.sync += reg.eq(value)
    return Mux(load, value, reg)


def gather(m: Module, en, beat: Value, beats: int, name: str, clear=0):
    """Collect ``beats`` beats (one per cycle where ``en`` is high) into a line.

    Returns ``(line, complete)``: ``complete`` is high with the line's last beat, and ``line``
    (``beats * len(beat)`` bits, beat 0 in the low bits) is valid then.  ``clear`` restarts at beat 0.
    """
    if beats == 1:
        return beat, en
    wb = len(beat)
    k = Signal(range(beats), name=f"{name}_k")
    reg = Signal((beats - 1) * wb, name=f"{name}_sr", reset_less=True)
    complete = Signal(name=f"{name}_complete")
    m.d.comb += complete.eq(en & (k == beats - 1))
    with m.If(en):
        m.d.sync += [reg.eq(Cat(reg[wb:], beat)), k.eq(Mux(k == beats - 1, 0, k + 1))]
    with m.If(clear):
        m.d.sync += k.eq(0)
    return Cat(reg, beat), complete


def serialize_two_rates(m: Module, load_w, load_n, line: Value, w_bits: int, n_bits: int, name: str, clear=0):
    """One shift register that cuts ``line`` into beats of ``w_bits`` (after ``load_w``) or of ``n_bits`` (after
    ``load_n``; ``n_bits`` divides ``w_bits``), for two units of which only one runs at a time (the vector unit's
    ``W`` lanes and the activation unit's ``NW``): a register of ``len(line) - n_bits`` bits instead of two.

    Returns ``(beat_w, active_w, first_w, last_w), (beat_n, active_n, last_n)`` as :func:`serialize` does for
    each rate; the beats of one load must be out before either load rises again.
    """
    nb_w, nb_n = len(line) // w_bits, len(line) // n_bits
    assert w_bits % n_bits == 0 and nb_w * w_bits == len(line) and nb_n >= 2, (name, len(line), w_bits, n_bits)
    if nb_w == 1:  # whole lines for the wide unit: only the narrow one needs the register
        (bn,), an, _, ln = serialize(m, load_n, [line], [n_bits], nb_n, name, clear)
        return (line, load_w, Const(1, 1), Const(1, 1)), (bn, an, ln)
    reg = Signal(len(line) - n_bits, name=f"{name}_sr", reset_less=True)
    narrow = Signal(name=f"{name}_narrow")  # the last load was load_n: shift n_bits a cycle, else w_bits
    with m.If(load_w | load_n):
        m.d.sync += [reg.eq(line[n_bits:]), narrow.eq(load_n)]
    with m.Elif(narrow):
        m.d.sync += reg.eq(reg >> n_bits)
    with m.Else():
        m.d.sync += reg.eq(reg >> w_bits)
    outs = []
    for load, bits, beats, tag in ((load_w, w_bits, nb_w, "w"), (load_n, n_bits, nb_n, "n")):
        active, last = _beats_out(m, load, beats, f"{name}_{tag}", clear)
        # the register holds the line from bit n_bits on: a wide beat k >= 1 sits w_bits - n_bits into it
        off = bits - n_bits
        beat = Signal(bits, name=f"{name}_beat_{tag}")
        m.d.comb += beat.eq(Mux(load, line[:bits], reg[off:off + bits]))
        outs.append((beat, active, load, last))
    (bw, aw, fw, lw), (bn, an, _, ln) = outs
    return (bw, aw, fw, lw), (bn, an, ln)

