module t(input clk, input rst, input we, input ce, input [9:0] wa, input [9:0] ra, input [17:0] wd,
         input [15:0] a, input [15:0] b,
         output reg [17:0] q_plain, output reg [17:0] q_ce, output reg [17:0] q_rst, output reg [17:0] q_fan,
         output [17:0] q_fan2, output reg [31:0] p, output reg [7:0] cnt);
  (* no_rw_check *) reg [17:0] m0 [0:1023]; (* no_rw_check *) reg [17:0] m1 [0:1023]; (* no_rw_check *) reg [17:0] m2 [0:1023]; (* no_rw_check *) reg [17:0] m3 [0:1023];
  reg [17:0] r0, r1, r2, r3;
  reg [15:0] a_r, b_r;
  reg rst_r;
  always @(posedge clk) begin
    if (we) begin m0[wa] <= wd; m1[wa] <= wd; m2[wa] <= wd; m3[wa] <= wd; end
    r0 <= m0[ra]; r1 <= m1[ra]; r2 <= m2[ra]; r3 <= m3[ra];
    q_plain <= r0;
    if (ce) q_ce <= r1;
    if (rst_r) q_rst <= 0; else q_rst <= r2;
    q_fan <= r3;
    a_r <= a; b_r <= b; p <= a_r * b_r;
    rst_r <= rst;
    if (rst_r) cnt <= 0; else cnt <= cnt + 1;
  end
  assign q_fan2 = r3 ^ {18{ce}};
endmodule
