// Fast RTL harness: the Verilated accelerator with a C++ DRAM model and C++ AXI models.
// No Python on the clock edge: Python writes the DRAM image to a file, runs this binary and reads
// the image and a JSON result back (see fast_harness.py, which also generates fast_regs.h from
// systolica/csr.py and fast_ports.h for the configuration's port count and data width).
//
// usage: harness DRAM_IN DRAM_OUT WIN_BASE WIN_SIZE PROG_BASE PROG_LEN MAX_CYCLES [STALL_PERCENT SEED]
// STALL_PERCENT > 0 makes the DRAM model withhold ready/valid at random (a valid, once shown, is held
// until taken, as AXI requires), so the fast path also runs under random latency and back-pressure.
// Built with --trace-fst (or --trace), the run writes a waveform to $SYSTOLICA_WAVES_FILE when set:
// every signal, both clock edges, 10 ns a cycle.
// Bus errors: a beat beyond the DRAM image is answered DECERR (as an interconnect answers an unmapped
// address); $SYSTOLICA_SLVERR_READ / $SYSTOLICA_SLVERR_WRITE = "LO:HI" (physical, hex or decimal) make
// reads / writes touching [LO, HI) answer SLVERR (a write burst: in its B response).
// DRAM latency: $SYSTOLICA_DRAM_LATENCY = L cycles (default 0).  A burst whose AR handshakes at clock edge t
// shows its first R beat for edge t + L at the earliest, a write burst whose last W beat handshakes at t its B
// response for t + L (0 and 1 both give the model's minimum of one cycle: what it did before there was a
// latency).  Bursts stay in order per port and any number may be outstanding, each with its own ready
// time, so a master that keeps L / burst-length bursts in flight still sees one beat a cycle.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "Vsystolica_accel.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
typedef VerilatedFstC Trace;
#elif VM_TRACE
#include "verilated_vcd_c.h"
typedef VerilatedVcdC Trace;
#endif
#include "fast_regs.h"   // REG_<NAME> offsets, COUNTER list (generated from systolica/csr.py)
#include "fast_ports.h"  // DMA_BYTES, FOR_EACH_PORT(X) (generated from the AccelConfig)

static std::vector<uint8_t> mem;
static uint64_t win_lo = 0, win_hi = 0, violations = 0;
static Vsystolica_accel* top;
static uint64_t cycle = 0;
#if VM_TRACE
static Trace* tfp = nullptr;
static uint64_t trace_t = 0;
static inline void eval() { top->eval(); if (tfp) tfp->dump(trace_t += 5000); }  // ps: 10 ns a cycle
#else
static inline void eval() { top->eval(); }
#endif

struct Burst { uint64_t addr; unsigned beats; unsigned done; unsigned resp; uint64_t ready; };  // ready: first edge
struct Bresp { unsigned resp; uint64_t ready; };
struct Port {
    std::deque<Burst> ar, aw; std::deque<Bresp> bresp;
    uint64_t rd_beats = 0, wr_beats = 0, ar_bursts = 0, aw_bursts = 0;
    bool r_shown = false, b_shown = false;
};
static uint64_t dram_latency = 0;  // cycles, $SYSTOLICA_DRAM_LATENCY

struct Range { uint64_t lo = 0, hi = 0; };
static Range slverr_rd, slverr_wr;
static Range parse_range(const char* name) {
    Range r;
    const char* v = std::getenv(name);
    if (v && *v) {
        char* end = nullptr;
        r.lo = std::strtoull(v, &end, 0);
        if (end && *end == ':') r.hi = std::strtoull(end + 1, nullptr, 0);
    }
    return r;
}
static unsigned resp_of(uint64_t a, unsigned n, const Range& err) {  // AXI: 0 OKAY, 2 SLVERR, 3 DECERR
    if (a + n > mem.size()) return 3;
    if (a < err.hi && err.lo < a + n) return 2;
    return 0;
}

static unsigned stall_pct = 0;
static uint64_t rng = 88172645463325252ull;
static bool stall() {  // xorshift64: cheap and reproducible from the seed
    if (!stall_pct) return false;
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng % 100 < stall_pct;
}
static Port ports[NPORTS];

static void guard(uint64_t addr, unsigned n) {
    if (addr < win_lo || addr + n > win_hi) violations++;
}

// data words of any width: Verilator uses uint32_t, uint64_t or VlWide<N> (an array of uint32_t)
template <typename T> static void put_bytes(T& sig, const uint8_t* src) {
    if constexpr (sizeof(T) <= 8) { uint64_t v = 0; std::memcpy(&v, src, DMA_BYTES); sig = (T)v; }
    else std::memcpy(sig.data(), src, DMA_BYTES);
}
template <typename T> static void get_bytes(const T& sig, uint8_t* dst) {
    if constexpr (sizeof(T) <= 8) { uint64_t v = (uint64_t)sig; std::memcpy(dst, &v, DMA_BYTES); }
    else std::memcpy(dst, sig.data(), DMA_BYTES);
}

// Before the rising edge: drive the subordinate side from the model state.
#define PORT_DRIVE(P)                                                                          \
    {                                                                                          \
        Port& p = ports[P];                                                                    \
        top->m_axi_gmem##P##_arready = !stall();                                               \
        top->m_axi_gmem##P##_awready = !stall();                                               \
        top->m_axi_gmem##P##_wready = !p.aw.empty() && !stall();                               \
        /* cycle: the edge this drive is for; a burst's data waits for its ready edge */      \
        p.r_shown = !p.ar.empty() && cycle >= p.ar.front().ready && (p.r_shown || !stall());  \
        p.b_shown = !p.bresp.empty() && cycle >= p.bresp.front().ready && (p.b_shown || !stall()); \
        top->m_axi_gmem##P##_rvalid = p.r_shown;                                               \
        top->m_axi_gmem##P##_rresp = 0;                                                        \
        top->m_axi_gmem##P##_bresp = p.bresp.empty() ? 0 : p.bresp.front().resp;               \
        top->m_axi_gmem##P##_rid = 0; top->m_axi_gmem##P##_bid = 0;                            \
        if (!p.ar.empty()) {                                                                   \
            Burst& b = p.ar.front();                                                           \
            uint64_t a = b.addr + (uint64_t)b.done * DMA_BYTES;                                \
            uint8_t buf[64] = {0};                                                             \
            if (a + DMA_BYTES <= mem.size()) std::memcpy(buf, &mem[a], DMA_BYTES);             \
            put_bytes(top->m_axi_gmem##P##_rdata, buf);                                        \
            top->m_axi_gmem##P##_rresp = resp_of(a, DMA_BYTES, slverr_rd);                     \
            top->m_axi_gmem##P##_rlast = b.done + 1 == b.beats;                                \
        }                                                                                      \
        top->m_axi_gmem##P##_bvalid = p.b_shown;                                               \
    }

// Sampled just before the rising edge: the handshakes that happen at it.
#define PORT_SAMPLE(P)                                                                         \
    {                                                                                          \
        Port& p = ports[P];                                                                    \
        bool r_hs = top->m_axi_gmem##P##_rvalid && top->m_axi_gmem##P##_rready;                \
        bool w_hs = top->m_axi_gmem##P##_wvalid && top->m_axi_gmem##P##_wready;                \
        bool b_hs = top->m_axi_gmem##P##_bvalid && top->m_axi_gmem##P##_bready;                \
        if (r_hs) {                                                                            \
            p.r_shown = false;                                                                 \
            Burst& b = p.ar.front();                                                           \
            guard(b.addr + (uint64_t)b.done * DMA_BYTES, DMA_BYTES);                           \
            p.rd_beats++;                                                                      \
            if (++b.done == b.beats) p.ar.pop_front();                                         \
        }                                                                                      \
        if (w_hs) {                                                                            \
            Burst& b = p.aw.front();                                                           \
            uint64_t a = b.addr + (uint64_t)b.done * DMA_BYTES;                                \
            uint8_t buf[64];                                                                   \
            get_bytes(top->m_axi_gmem##P##_wdata, buf);                                        \
            uint64_t strb = top->m_axi_gmem##P##_wstrb;                                        \
            unsigned resp = strb ? resp_of(a, DMA_BYTES, slverr_wr) : 0;                       \
            if (resp > b.resp) b.resp = resp;                                                  \
            for (unsigned i = 0; i < DMA_BYTES; i++)                                           \
                if ((strb >> i) & 1) { guard(a + i, 1); if (!resp) mem[a + i] = buf[i]; }      \
            p.wr_beats++;                                                                      \
            if (++b.done == b.beats) { p.bresp.push_back({b.resp, cycle + dram_latency}); p.aw.pop_front(); } \
        }                                                                                      \
        if (b_hs) { p.bresp.pop_front(); p.b_shown = false; }                                  \
        if (top->m_axi_gmem##P##_arvalid && top->m_axi_gmem##P##_arready) {                    \
            p.ar.push_back({top->m_axi_gmem##P##_araddr, (unsigned)top->m_axi_gmem##P##_arlen + 1u, 0, 0, \
                            cycle + dram_latency});                                            \
            p.ar_bursts++;                                                                     \
        }                                                                                      \
        if (top->m_axi_gmem##P##_awvalid && top->m_axi_gmem##P##_awready) {                    \
            p.aw.push_back({top->m_axi_gmem##P##_awaddr, (unsigned)top->m_axi_gmem##P##_awlen + 1u, 0, 0, 0}); \
            p.aw_bursts++;                                                                     \
        }                                                                                      \
    }

static void tick() {
    top->ap_clk = 0;
    FOR_EACH_PORT(PORT_DRIVE)
    eval();
    FOR_EACH_PORT(PORT_SAMPLE)
    top->ap_clk = 1;
    eval();
    cycle++;
}

// AXI4-Lite: one write / read at a time, through the same clock loop.
static void csr_write(uint32_t addr, uint32_t data) {
    top->s_axi_control_awaddr = addr; top->s_axi_control_awvalid = 1;
    top->s_axi_control_wdata = data; top->s_axi_control_wstrb = 0xF; top->s_axi_control_wvalid = 1;
    top->s_axi_control_bready = 1;
    bool aw = false, w = false;
    for (int i = 0; i < 100; i++) {
        top->ap_clk = 0; FOR_EACH_PORT(PORT_DRIVE) eval();
        bool aw_hs = top->s_axi_control_awvalid && top->s_axi_control_awready;
        bool w_hs = top->s_axi_control_wvalid && top->s_axi_control_wready;
        bool b_hs = top->s_axi_control_bvalid;
        FOR_EACH_PORT(PORT_SAMPLE)
        top->ap_clk = 1; eval(); cycle++;
        if (aw_hs) { aw = true; top->s_axi_control_awvalid = 0; }
        if (w_hs) { w = true; top->s_axi_control_wvalid = 0; }
        if (b_hs && aw && w) { top->s_axi_control_bready = 0; return; }
    }
    std::fprintf(stderr, "CSR write to %#x got no response\n", addr);
    std::exit(3);
}

static uint32_t csr_read(uint32_t addr) {
    top->s_axi_control_araddr = addr; top->s_axi_control_arvalid = 1; top->s_axi_control_rready = 1;
    for (int i = 0; i < 100; i++) {
        top->ap_clk = 0; FOR_EACH_PORT(PORT_DRIVE) eval();
        bool ar_hs = top->s_axi_control_arvalid && top->s_axi_control_arready;
        bool r_hs = top->s_axi_control_rvalid;
        uint32_t data = top->s_axi_control_rdata;
        FOR_EACH_PORT(PORT_SAMPLE)
        top->ap_clk = 1; eval(); cycle++;
        if (ar_hs) top->s_axi_control_arvalid = 0;
        if (r_hs && !top->s_axi_control_arvalid) { top->s_axi_control_rready = 0; return data; }
    }
    std::fprintf(stderr, "CSR read of %#x got no response\n", addr);
    std::exit(3);
}

int main(int argc, char** argv) {
    if (argc != 8 && argc != 10) {
        std::fprintf(stderr, "usage: %s DRAM_IN DRAM_OUT WIN_BASE WIN_SIZE PROG_BASE PROG_LEN MAX_CYCLES "
                     "[STALL_PERCENT SEED]\n", argv[0]);
        return 2;
    }
    if (argc == 10) {
        stall_pct = std::strtoul(argv[8], nullptr, 0);
        rng ^= std::strtoull(argv[9], nullptr, 0) * 0x9E3779B97F4A7C15ull;
        if (!rng) rng = 1;
    }
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) { std::perror(argv[1]); return 2; }
    std::fseek(f, 0, SEEK_END);
    mem.resize(std::ftell(f));
    std::fseek(f, 0, SEEK_SET);
    if (std::fread(mem.data(), 1, mem.size(), f) != mem.size()) { std::perror("read"); return 2; }
    std::fclose(f);
    uint64_t wbase = std::strtoull(argv[3], nullptr, 0), wsize = std::strtoull(argv[4], nullptr, 0);
    uint32_t pbase = std::strtoul(argv[5], nullptr, 0), plen = std::strtoul(argv[6], nullptr, 0);
    uint64_t max_cycles = std::strtoull(argv[7], nullptr, 0);
    win_lo = wbase; win_hi = wbase + wsize;
    slverr_rd = parse_range("SYSTOLICA_SLVERR_READ");
    slverr_wr = parse_range("SYSTOLICA_SLVERR_WRITE");
    if (const char* v = std::getenv("SYSTOLICA_DRAM_LATENCY"); v && *v) dram_latency = std::strtoull(v, nullptr, 0);

    auto ctx = new VerilatedContext;
#if VM_TRACE
    const char* wave_path = std::getenv("SYSTOLICA_WAVES_FILE");
    if (wave_path && *wave_path) ctx->traceEverOn(true);
#endif
    top = new Vsystolica_accel{ctx};
#if VM_TRACE
    if (wave_path && *wave_path) {
        tfp = new Trace;
        top->trace(tfp, 99);
        tfp->open(wave_path);
    }
#endif
    top->ap_rst_n = 0;
    for (int i = 0; i < 5; i++) tick();
    top->ap_rst_n = 1;
    tick();
    csr_write(REG_WIN_BASE_LO, (uint32_t)wbase);
    csr_write(REG_WIN_BASE_HI, (uint32_t)(wbase >> 32));
    csr_write(REG_WIN_SIZE, (uint32_t)wsize);
    csr_write(REG_PROG_BASE, pbase);
    csr_write(REG_PROG_LEN, plen);
    csr_write(REG_IRQ_ENABLE, 1);
    auto t0 = std::chrono::steady_clock::now();
    uint64_t c0 = cycle;
    csr_write(REG_CTRL, 1);
    bool done = false;
    while (cycle - c0 < max_cycles) {
        tick();
        if (top->__SYM__interrupt) { done = true; break; }  // Verilator renames the port: "interrupt" is a C++ keyword-ish name
    }
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t run_cycles = cycle - c0;
    Port snap[NPORTS];  // the beats of the run itself (the CSR reads below add none, but keep it exact)
    for (int i = 0; i < NPORTS; i++) snap[i] = ports[i];
    std::printf("{\"done\": %s, \"status\": %u, \"code\": %u, \"pc\": %u, \"sim_cycles\": %llu, \"wall_s\": %.6f, "
                "\"violations\": %llu, \"counters\": {", done ? "true" : "false", csr_read(REG_STATUS),
                csr_read(REG_ERROR_CODE), csr_read(REG_ERROR_PC), (unsigned long long)run_cycles, wall,
                (unsigned long long)violations);
    for (int i = 0; i < N_COUNTERS; i++) {
        uint64_t lo = csr_read(COUNTER_OFFSETS[i]);
        uint64_t hi = csr_read(COUNTER_OFFSETS[i] + 4);
        std::printf("%s\"%s\": %llu", i ? ", " : "", COUNTER_NAMES[i], (unsigned long long)(lo | (hi << 32)));
    }
    std::printf("}, \"dram_latency\": %llu, \"ports\": [", (unsigned long long)dram_latency);
    for (int i = 0; i < NPORTS; i++)
        std::printf("%s{\"rd_beats\": %llu, \"wr_beats\": %llu, \"ar_bursts\": %llu, \"aw_bursts\": %llu}", i ? ", " : "",
                    (unsigned long long)snap[i].rd_beats, (unsigned long long)snap[i].wr_beats,
                    (unsigned long long)snap[i].ar_bursts, (unsigned long long)snap[i].aw_bursts);
    std::printf("]}\n");
    f = std::fopen(argv[2], "wb");
    if (!f || std::fwrite(mem.data(), 1, mem.size(), f) != mem.size()) { std::perror(argv[2]); return 2; }
    std::fclose(f);
    top->final();
#if VM_TRACE
    if (tfp) { tfp->close(); delete tfp; }
#endif
    delete top;
    delete ctx;
    return 0;
}
