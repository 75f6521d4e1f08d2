"""The weight ports' lines per output line (``hw/weight_stream.row_lines``, shifts and adds in the circuit) are the
layout's byte count (``layout.wstream_port_bytes``, the formula golden and the decoder's window check use)."""

from __future__ import annotations

import pytest

from systolica.config import preset
from systolica.hw.weight_stream import row_lines
from systolica.layout import wstream_port_bytes
from systolica.numerics_int4 import GROUP


@pytest.mark.parametrize("ports,cols", [(1, 4), (2, 4), (1, 8), (2, 8), (4, 16), (2, 16), (4, 32), (4, 4)])
def test_row_lines_are_the_layout_formula(ports, cols):
    cfg = preset("tiny").replace(name="t", rows=cols, cols=cols, dma_ports=ports, acc_kib=64)
    group = max(1, GROUP // cols)
    for k in range(0, 40):
        for fmt in (0, 1, 2):
            if fmt and (k % group or cols % (2 * ports)):  # only legal 4-bit words reach the weight ports
                continue
            want = wstream_port_bytes({"n": 1, "k": k, "wfmt": fmt}, cfg) // cols
            assert row_lines(k, fmt, cfg) == want, (k, fmt)
