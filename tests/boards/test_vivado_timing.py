"""Reading WNS back from Vivado's report_timing_summary text."""

from __future__ import annotations

import pytest

from systolica.boards.vivado_timing import VivadoTimingError, parse_timing_summary, read_timing_summary

SUMMARY = """\
------------------------------------------------------------------------------------------------
| Design Timing Summary
| ---------------------
------------------------------------------------------------------------------------------------

    WNS(ns)      TNS(ns)  TNS Failing Endpoints  TNS Total Endpoints      WHS(ns)      THS(ns)  THS Failing Endpoints  THS Total Endpoints     WPWS(ns)     TPWS(ns)  TPWS Failing Endpoints  TPWS Total Endpoints
    -------      -------  ---------------------  -------------------      -------      -------  ---------------------  -------------------     --------     --------  ----------------------  --------------------
     {wns}      -12.345                     17                48211        0.021        0.000                      0                48211        1.520        0.000                       0                 20355


Timing constraints are not met.
"""


def test_negative_and_positive_slack():
    t = parse_timing_summary(SUMMARY.format(wns="-0.400"), 200.0)
    assert t.wns_ns == -0.4 and t.tns_ns == -12.345 and t.failing_endpoints == 17 and not t.meets_target
    assert t.fmax_mhz == pytest.approx(1000 / 5.4)  # 5 ns period + 0.4 ns
    t = parse_timing_summary(SUMMARY.format(wns="1.250"), 100.0)
    assert t.meets_target and t.fmax_mhz == pytest.approx(1000 / 8.75)


def test_reports_without_a_figure_are_refused(tmp_path):
    with pytest.raises(VivadoTimingError, match="no WNS figure"):
        parse_timing_summary(SUMMARY.format(wns="NA"), 100.0)
    with pytest.raises(VivadoTimingError, match="no Design Timing Summary"):
        parse_timing_summary("Timing constraints are not met.\n", 100.0)
    with pytest.raises(VivadoTimingError, match="does not exist"):
        read_timing_summary(tmp_path / "timing.rpt", 100.0)
