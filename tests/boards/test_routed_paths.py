"""The slowest endpoints of a routed design, read from nextpnr's detailed timing report."""

from __future__ import annotations

import json

import pytest

from systolica.boards.routed_paths import (
    endpoints,
    late_by_unit,
    late_pins,
    main,
    register_of,
    slowest_registers,
    unit_of,
)

CLK = "posedge $glbnet$clk$TRELLIS_IO_IN"


def _net(driver, port, *sinks):
    return {"driver": driver, "port": port, "event": CLK, "net": f"{driver}_{port}",
            "endpoints": [{"cell": c, "port": p, "event": CLK, "delay": [lo, hi]} for c, p, lo, hi in sinks]}


#: the shape of nextpnr-ecp5's report (fields and names as a routed STORE engine's); the critical path is the
#: design's slowest endpoint (9.774 ns), not the wrapper's shift register, which also times its async pins
REPORT = {
    "fmax": {"$glbnet$clk$TRELLIS_IO_IN": {"achieved": 102.31, "constraint": 100}},
    "critical_paths": [],
    "detailed_net_timings": [
        _net("sr_out_TRELLIS_FF_Q_96_DI_LUT4_Z", "F", ("sr_out_TRELLIS_FF_Q_96", "DI", 10.2, 11.9)),
        _net("dut.dma.wr_rows_left_TRELLIS_FF_Q_7_DI_PFUMX_Z_BLUT_LUT4_Z", "OFX",
             ("dut.dma.wr_rows_left_TRELLIS_FF_Q_7", "M", 2.59, 9.774)),
        _net("dut.dma.wr_rows_left_TRELLIS_FF_Q_12_DI_PFUMX_Z_BLUT_LUT4_Z", "OFX",
             ("dut.dma.wr_rows_left_TRELLIS_FF_Q_12", "M", 2.1, 9.535)),
        _net("dut.acc_wt_data_TRELLIS_FF_Q_192_DI_LUT4_Z", "F", ("dut.acc_mem.0.12", "DIA4", 8.0, 16.36),
             ("dut.acc_mem.0.3", "DIA1", 7.0, 15.1)),
        # the same endpoint under two launch clocks: its latest arrival counts
        _net("dut.compute.vseq.p_TRELLIS_FF_Q", "Q", ("dut.compute.vseq.q_TRELLIS_FF_Q_2", "DI", 0.9, 4.0)),
        _net("dut.compute.vseq.r_TRELLIS_FF_Q", "Q", ("dut.compute.vseq.q_TRELLIS_FF_Q_2", "DI", 0.9, 11.0)),
    ],
}


def test_endpoints_are_the_designs_latest_arrivals_slowest_first():
    eps = endpoints(REPORT)
    assert [e.ns for e in eps] == [16.36, 15.1, 11.0, 9.774, 9.535]  # the wrapper's register left out
    assert eps[0].cell == "dut.acc_mem.0.12" and eps[0].pin == "DIA4"
    assert eps[0].driver == "dut.acc_wt_data_TRELLIS_FF_Q_192_DI_LUT4_Z"
    assert eps[2].cell == "dut.compute.vseq.q_TRELLIS_FF_Q_2" and eps[2].driver == "dut.compute.vseq.r_TRELLIS_FF_Q"


def test_registers_and_units_of_packed_cells():
    assert register_of("dut.store.last_addr_TRELLIS_FF_Q_3") == "dut.store.last_addr"
    assert register_of("dut.acc_mem.0.12") == "dut.acc_mem"
    assert register_of("dut.vbuf_a_mem.0.8_DOB14_TRELLIS_FF_Q") == "dut.vbuf_a_mem"  # a register on its read data
    assert register_of("dut.acc_wt_data_TRELLIS_FF_Q_192_DI_LUT4_Z") == "dut.acc_wt_data"
    assert unit_of("dut.compute.vseq.act.o_TRELLIS_FF_Q") == "dut.compute.vseq"
    assert unit_of("dut.store.served_TRELLIS_FF_Q", depth=2) == "dut.store"


def test_one_line_a_register_and_the_late_ones_by_unit():
    eps = endpoints(REPORT)
    regs = slowest_registers(eps, 10)
    assert [register_of(e.cell) for e in regs] == ["dut.acc_mem", "dut.compute.vseq.q", "dut.dma.wr_rows_left"]
    assert regs[2].ns == 9.774  # a register's slowest bit
    assert late_by_unit(eps, 10.0) == [("dut.acc_mem", 2, 16.36), ("dut.compute.vseq", 1, 11.0)]
    assert late_by_unit(eps, 9.6, depth=2) == [("dut.acc_mem", 2, 16.36), ("dut.compute", 1, 11.0),
                                                ("dut.dma", 1, 9.774)]
    assert late_by_unit(eps, 20.0) == []
    # which pins: two block RAM data pins (DIA4, DIA1 as one kind), a flip-flop's data input
    assert late_pins(eps, 10.0) == {"dut.acc_mem": {"DIA": 2}, "dut.compute.vseq": {"DI": 1}}
    assert late_pins(eps, 9.6, depth=2)["dut.dma"] == {"M": 1}


def test_a_report_without_detailed_timings_says_how_to_get_them():
    with pytest.raises(ValueError, match="--detailed-timing-report"):
        endpoints({"fmax": {}, "critical_paths": []})


def test_the_command_reads_the_flows_folder(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    assert main([str(tmp_path), "--paths", "2"]) == 0
    out = capsys.readouterr().out
    assert "5 endpoints of the design" in out and "slowest 16.36 ns (61.1 MHz)" in out
    assert "3 arrive later than 10 ns (100 MHz)" in out
    assert "16.36 ns  dut.acc_mem.DIA4  <- dut.acc_wt_data_TRELLIS_FF_Q_192_DI_LUT4_Z" in out
    assert "dut.dma" not in out.split("by unit")[0].split("slowest registers")[1]  # --paths 2
    assert "      2   16.36 ns  dut.acc_mem  (DIA 2)" in out and "11.00 ns  dut.compute.vseq  (DI 1)" in out
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nowhere")])
    (tmp_path / "r.json").write_text(json.dumps({"fmax": {}}))
    with pytest.raises(SystemExit):
        main([str(tmp_path / "r.json")])
    assert "--detailed-timing-report" in capsys.readouterr().err


def test_the_build_says_how_many_endpoints_miss_100_mhz_and_where(tmp_path):
    from systolica.cli.build import Build

    said = []
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    Build._late_endpoints(tmp_path / "report.json", said.append)
    assert said == [f"  3 of 5 endpoints arrive later than 10 ns (100 MHz): dut.acc_mem 2, dut.compute.vseq 1; "
                    f"python -m systolica.boards.routed_paths {tmp_path}"]
    (tmp_path / "old.json").write_text(json.dumps({"fmax": {}}))  # a report routed without the details: nothing
    Build._late_endpoints(tmp_path / "old.json", said.append)
    assert len(said) == 1
