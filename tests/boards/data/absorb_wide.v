// A buffer four block RAMs wide (1024 x 72), its read address from a register, its read enable from logic.
module wide(input clk, input we, input re, input go, input [9:0] wa, input [9:0] ra, input [71:0] wd,
            output reg [71:0] q);
  (* no_rw_check *) reg [71:0] mem [0:1023];
  reg [9:0] ra_r;
  reg re_r, go_r;
  always @(posedge clk) begin
    ra_r <= ra; re_r <= re; go_r <= go;
    if (we) mem[wa] <= wd;
    if (re_r & go_r) q <= mem[ra_r];
  end
endmodule
