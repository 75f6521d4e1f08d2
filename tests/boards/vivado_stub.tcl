# Stand-ins for the Vivado Tcl commands systolica's build scripts use.  Each records
# its call (fields separated by \x1f, one call per line) in $::stub_log and returns
# a handle or value the script can go on with, so tclsh really parses and runs the
# generated script.  A command not defined here fails as in any tclsh ("invalid
# command name"), which catches typos in command names.
#
# The test sets before sourcing the script:
#   ::stub_log      path of the call log
#   ::stub_ports    ports of the Verilog top level
#   ::stub_busifs   AXI interfaces (port-name prefixes) found in that Verilog
# ipx::get_bus_interfaces answers from ::stub_busifs (plus the clock, reset and
# interrupt ports), as Vivado's inference from port names would.

set ::stub_fd [open $::stub_log w]
fconfigure $::stub_fd -encoding utf-8

proc stub_record {args} {
    puts $::stub_fd [join $args "\x1f"]
    flush $::stub_fd
}

proc stub_generic {name} {
    proc $name {args} "stub_record [list $name] {*}\$args; return {}"
}

foreach cmd {create_project add_files update_compile_order update_ip_catalog create_bd_design
             apply_bd_automation connect_bd_net connect_bd_intf_net assign_bd_address validate_bd_design
             save_bd_design generate_target wait_on_run open_run report_timing_summary
             report_utilization close_project package_xo} {
    stub_generic $cmd
}

proc current_fileset {args} { return sources_1 }
proc current_project {args} { return project_1 }
proc get_parts {args} { stub_record get_parts {*}$args; return [lindex $args end] }
proc get_ipdefs {args} {
    stub_record get_ipdefs {*}$args
    set filter [lindex $args end]
    regexp {xilinx.com:ip:([A-Za-z0-9_]+):} $filter -> ip
    return [list "xilinx.com:ip:$ip:10.0" "xilinx.com:ip:$ip:1.0" "xilinx.com:ip:$ip:2.1"]
}
proc set_property {args} { stub_record set_property {*}$args }
proc get_files {args} { return "files:[lindex $args end]" }
proc make_wrapper {args} { stub_record make_wrapper {*}$args; return "system_wrapper.v" }
proc get_runs {name} { return "run:$name" }
proc get_property {key obj} {
    stub_record get_property $key $obj
    switch -- $key {
        PROGRESS { return "100%" }
        STATS.WNS { return 0.125 }
        default { return "" }
    }
}
# Cells created in the block design, so pin lookups can be checked against them.
set ::stub_cells [dict create]
proc create_bd_cell {args} {
    stub_record create_bd_cell {*}$args
    set name [lindex $args end]
    dict set ::stub_cells $name [lindex $args [expr {[lsearch $args -vlnv] + 1}]]
    return "cell:$name"
}
proc stub_pin {kind path} {
    stub_record $kind $path
    set cell [lindex [split $path /] 0]
    set pin [lindex [split $path /] 1]
    if {![dict exists $::stub_cells $cell]} { error "$kind $path: no cell $cell in the block design" }
    if {$cell eq "accel_0"} {
        set known [expr {$kind eq "get_bd_pins" ? $::stub_ports : $::stub_busifs}]
        if {[lsearch -exact $known $pin] < 0} { error "$kind $path: the accelerator has no $pin" }
    }
    return "$kind:$path"
}
proc get_bd_pins {path} { return [stub_pin get_bd_pins $path] }
proc get_bd_intf_pins {path} { return [stub_pin get_bd_intf_pins $path] }
# Vivado writes the bitstream and the handoff file during launch_runs; so does the stub.
proc launch_runs {args} {
    stub_record launch_runs {*}$args
    set runs "$::proj_dir/bd/systolica.runs/impl_1"
    set hh "$::proj_dir/bd/systolica.gen/sources_1/bd/system/hw_handoff"
    file mkdir $runs $hh
    close [open "$runs/system_wrapper.bit" w]
    close [open "$hh/system.hwh" w]
}

namespace eval ipx {}
set ::stub_core_ifs {}
proc ipx::package_project {args} {
    stub_record ipx::package_project {*}$args
    set ::stub_core_ifs [concat $::stub_busifs [list ap_clk ap_rst_n interrupt]]
}
proc ipx::current_core {} { return core:accel }
proc ipx::get_bus_interfaces {args} {
    stub_record ipx::get_bus_interfaces {*}$args
    set name [lindex $args 0]
    if {[lsearch -exact $::stub_core_ifs $name] >= 0} { return "busif:$name" }
    return {}
}
foreach cmd {infer_bus_interfaces infer_bus_interface associate_bus_interfaces create_xgui_files
             update_checksums check_integrity save_core} {
    proc ipx::$cmd {args} "stub_record ipx::$cmd {*}\$args"
}
proc ipx::get_bus_parameters {args} { stub_record ipx::get_bus_parameters {*}$args; return {} }
proc ipx::add_bus_parameter {name busif} { stub_record ipx::add_bus_parameter $name $busif; return "param:$busif:$name" }
proc ipx::get_memory_maps {args} { stub_record ipx::get_memory_maps {*}$args; return "memmap:[lindex $args 0]" }
proc ipx::add_memory_map {args} { stub_record ipx::add_memory_map {*}$args; return "memmap:[lindex $args 0]" }
proc ipx::get_address_blocks {args} { return {} }
proc ipx::add_address_block {name mm} { stub_record ipx::add_address_block $name $mm; return "block:$name" }
proc ipx::add_register {name block} { stub_record ipx::add_register $name $block; return "register:$name" }
proc ipx::add_field {name reg} {
    stub_record ipx::add_field $name $reg
    return "field:[string range $reg 9 end]:$name"
}

# fail (defined by the script) exits; make that visible to the test.
rename exit stub_real_exit
proc exit {{code 0}} { stub_record exit $code; close $::stub_fd; stub_real_exit $code }
