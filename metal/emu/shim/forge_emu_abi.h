// forge_emu_abi.h — the interface between emulated kernels (compiled with
// metal_shim.h) and the emulator's runtime (runtime.cpp). Both sides
// include it; nothing here depends on a system header.
#pragma once

// forge_thread_info is what a launcher reads to call its kernel: the bound
// arguments and the built-in values of one GPU thread.
struct forge_thread_info {
    void* const* args;       // [[buffer(i)]] → pointer (buffer + offset)
    unsigned tpig[3];        // thread_position_in_grid
    unsigned tptg[3];        // thread_position_in_threadgroup
    unsigned tgpig[3];       // threadgroup_position_in_grid
    unsigned ntptg[3];       // threads_per_threadgroup
    unsigned ntgpg[3];       // threadgroups_per_grid
    unsigned ntpg[3];        // threads_per_grid
    unsigned tiitg;          // thread_index_in_threadgroup
    unsigned tiisg;          // thread_index_in_simdgroup
    unsigned sgiitg;         // simdgroup_index_in_threadgroup
    unsigned tpsg;           // threads_per_simdgroup (32)
    unsigned sgptg;          // simdgroups_per_threadgroup
};

typedef void (*forge_kernel_fn)(const forge_thread_info*);

enum { FORGE_SIMD_WIDTH = 32, FORGE_SIMD_SLOT = 64, FORGE_SIMD_SHARED = 512 };

// forge_simd_x is one simdgroup's exchange area for a simd_* rendezvous:
// each arriving lane writes in[lane] (and arg[lane]); when every live lane
// of the simdgroup has arrived, the operation runs once over the lanes that
// arrived at the same call (active) and writes out[lane] for each of them.
struct forge_simd_x {
    unsigned active;   // bit l: lane l takes part
    unsigned nlanes;   // lanes that exist in this simdgroup (≤ 32)
    int arg[FORGE_SIMD_WIDTH];
    alignas(64) unsigned char in[FORGE_SIMD_WIDTH][FORGE_SIMD_SLOT];
    alignas(64) unsigned char out[FORGE_SIMD_WIDTH][FORGE_SIMD_SLOT];
    // shared holds a result for all active lanes (a loaded 8×8 matrix).
    alignas(64) unsigned char shared[FORGE_SIMD_SHARED];
};

typedef void (*forge_simd_fn)(forge_simd_x*);

// Call sites are passed as a file name and `line`, which holds the line in
// its low 20 bits and the column above them.
extern "C" {
// forge_rt_barrier blocks the calling GPU thread at a threadgroup barrier
// until every live thread of its threadgroup arrived.
void forge_rt_barrier(const char* file, unsigned line);
// forge_rt_simd rendezvouses the calling lane with its simdgroup; fn runs
// once for the lanes that meet at the same call. It returns out[lane].
const void* forge_rt_simd(const void* in, unsigned size, int arg, forge_simd_fn fn,
                          const char* file, unsigned line);
// forge_rt_tg_slot returns the threadgroup-memory block of declaration
// site `site` for the calling thread's threadgroup (filled with 0xFF bytes
// when the threadgroup starts using it).
void* forge_rt_tg_slot(unsigned site, unsigned long size, unsigned long align,
                       const char* file, unsigned line);
// forge_rt_tg_static records, when the library loads, that the function
// fn declares size bytes (aligned to align) of threadgroup memory at site;
// forge_rt_tg_static_bytes sums a function's declarations as the arena
// lays them out.
int forge_rt_tg_static(const void* fn, unsigned site, unsigned long size, unsigned long align);
long forge_rt_tg_static_bytes(const void* fn);
// forge_rt_lane is the calling thread's thread_index_in_simdgroup.
unsigned forge_rt_lane(void);
// forge_rt_fault reports an error found by the shim (e.g. an unsupported
// operation) and ends the launch with it.
void forge_rt_fault(const char* msg, const char* file, unsigned line);

// Function constants of the current dispatch: value bits and "defined".
extern unsigned forge_rt_fc_bits[65536];
extern unsigned char forge_rt_fc_def[65536];
}
