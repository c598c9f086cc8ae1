// tgmem.metal — threadgroup memory of odd sizes and types.
#include <metal_stdlib>
using namespace metal;

// tg_odd: every thread fills its share of several odd-sized threadgroup
// arrays, then thread 0 checks them. out[0..7]: alignment ok, first-read
// NaN (arena fill), sums of each array, distinct addresses.
kernel void tg_odd(device float* out [[buffer(0)]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint n [[threads_per_threadgroup]]) {
    threadgroup char c3[3];
    threadgroup float f5[5];
    threadgroup half h7[7];
    threadgroup float4 v3[3];
    threadgroup float m2[3][5];
    threadgroup uint total;
    if (tid == 0) {
        out[0] = (((ulong)(threadgroup void*)f5) % 4 == 0 && ((ulong)(threadgroup void*)v3) % 16 == 0 &&
                  ((ulong)(threadgroup void*)h7) % 2 == 0) ? 1.0f : 0.0f;
        out[1] = isnan(f5[4]) && isnan(m2[2][4]) && total == 0xffffffffu ? 1.0f : 0.0f;
        total = 0;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < 3) c3[tid] = char(tid + 1);
    if (tid < 5) f5[tid] = float(tid) * 1.5f;
    if (tid < 7) h7[tid] = half(tid);
    if (tid < 3) v3[tid] = float4(tid, tid, tid, 1);
    if (tid < 15) m2[tid / 5][tid % 5] = float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float s = 0;
        for (int i = 0; i < 3; i++) s += c3[i];
        out[2] = s;  // 6
        s = 0;
        for (int i = 0; i < 5; i++) s += f5[i];
        out[3] = s;  // 15
        s = 0;
        for (int i = 0; i < 7; i++) s += h7[i];
        out[4] = s;  // 21
        float4 t = v3[0] + v3[1] + v3[2];
        out[5] = t.x + t.w;  // 3 + 3
        s = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) s += m2[i][j];
        out[6] = s;  // 105
    }
}

// tg_too_big asks for more than 32 KB of threadgroup memory.
kernel void tg_too_big(device float* out [[buffer(0)]],
                       uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float big[9000];
    big[tid] = 1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = big[tid];
}
