// A block RAM and a multiplier, each read into a register, then into logic: every path of the design starts
// or ends at one of the two registers that tests/boards/test_ecp5_absorb.py moves into the blocks.
module fast(input clk, input we, input [9:0] wa, input [9:0] ra, input [17:0] wd, input [15:0] a, input [15:0] b,
            input x, output reg [17:0] q, output reg [31:0] s);
  (* no_rw_check *) reg [17:0] mem [0:1023];
  reg [17:0] rd, rd_r;
  reg [15:0] a_r, b_r;
  reg [31:0] p;
  reg x_r, we_r;
  reg [9:0] wa_r, ra_r;
  reg [17:0] wd_r;
  always @(posedge clk) begin
    we_r <= we; wa_r <= wa; ra_r <= ra; wd_r <= wd; x_r <= x;
    if (we_r) mem[wa_r] <= wd_r;
    rd <= mem[ra_r];
    rd_r <= rd;
    q <= rd_r ^ {18{x_r}};
    a_r <= a; b_r <= b;
    p <= a_r * b_r;
    s <= p ^ {32{x_r}};
  end
endmodule
