// index.metal — Backend.IndexSelect, IndexAdd, Gather and ScatterAdd:
// float32 or int32 data (moved as 32-bit words; the adds take the dtype
// from a function constant), int32 indices.
//
// Every tensor is seen as three flattened groups around the axis, (P, S, Q)
// or (P, I, Q): P the product of the dimensions before the axis, S or I
// the axis, Q the product of those after it. All data views are contiguous
// (the Go side copies a strided one first); the 1-D index list of
// IndexSelect/IndexAdd may have any stride (istride).
//
// IndexSelect and Gather: one thread per destination element (grid-stride
// loop), dst[p, i, q] = src[p, idx[i], q] (IndexSelect) or
// src[p, idx[p, i, q], q] (Gather).
//
// IndexAdd (dst[:, idx[i], :] += src[:, i, :] in index order, dst zeroed
// first), deterministic without atomics, in three launches:
//   1. index_sort_keys (one threadgroup): a stable LSD radix sort of the
//      pairs (key, i) by key, 4 bits a pass (npass passes, ping-ponging
//      through two halves of a scratch buffer). A thread takes a contiguous
//      chunk of the current order, counts its digits into its own column of
//      a (digit, thread) histogram, an exclusive scan over that histogram in
//      digit-major order gives each (digit, thread) its first slot, and the
//      thread scatters its chunk in order: equal keys keep their order, so
//      the sorted values list every row's indices i in increasing order.
//      The key of i is idx[i]; one outside [0, S) (forge checked them; this
//      keeps memory safe) becomes S and lands after every valid row.
//   2. index_row_starts: start[r] = the first position of key ≥ r in the
//      sorted keys (binary search), for r = 0 … nkeys — the CSR row offsets.
//   3. index_add_x32: one thread per destination element (p, r, q) sums
//      src[p, i, q] over its row's list, starting from zero, in increasing
//      i: the same additions in the same order as the CPU backend, so the
//      result is bit-identical to it.
//
// ScatterAdd (dst[p, idx[p, i, q], q] += g[p, i, q] in index order, dst
// zeroed first) has an index list per (p, q) column. With many columns
// (scatter_add_x32) a thread owns a column: it walks i = 0 … I−1 in order
// and adds g into the destination row idx names (the Go side zeroes dst
// first). With few columns and long lists that would be a few long serial
// loops, so it takes IndexAdd's route instead (scatter = 1): the sort's
// key of element e = (p·I + i)·Q + q is (p·Q + q)·(S+1) + idx[e] (a bad
// index becomes S), the row starts cover nkeys = P·Q·(S+1) keys, and
// scatter_add_sorted_x32 sums each (p, s, q) list in increasing i.
//
// Function constants:
//   0 index_int (bool): index_add_x32, scatter_add_x32 and
//                       scatter_add_sorted_x32 add int32 (else float32).
#include <metal_stdlib>
using namespace metal;

enum : uint {
    INDEX_SORT_THREADS = 256, // most threads index_sort_keys is launched with
    INDEX_SORT_BITS = 4,      // key bits per radix pass
    INDEX_SORT_BUCKETS = 16,  // 1 << INDEX_SORT_BITS
    INDEX_MAX_SIMDGROUPS = 32,
    INDEX_BAD = 0xffffffffu   // written for an out-of-range index
};

// IndexParams: one block for every kernel of the file (fields a kernel does
// not use are zero).
struct IndexParams {
    uint p;       // P
    uint s;       // S: the extent indexed into (src of select/gather, dst of the adds)
    uint q;       // Q
    uint ni;      // I: indices along the axis
    int istride;  // stride of the 1-D index list (IndexSelect, IndexAdd)
    uint n;       // elements (or units) the launch covers
    uint npass;   // index_sort_keys: radix passes
    uint scatter; // index_sort_keys: 1 = ScatterAdd keys (see above), 0 = IndexAdd
    uint nkeys;   // index_row_starts: key rows (S for IndexAdd, P·Q·(S+1) for ScatterAdd)
    uint nsort;   // index_sort_keys, index_row_starts: elements sorted (I, or P·I·Q)
};

constant bool index_int [[function_constant(0)]];

// ---------------------------------------------------------------------------
// IndexSelect and Gather

kernel void index_select_x32(device uint* dst [[buffer(0)]],
                             const device uint* src [[buffer(1)]],
                             const device int* idx [[buffer(2)]],
                             constant IndexParams& p [[buffer(3)]],
                             uint gid [[thread_position_in_grid]],
                             uint gsize [[threads_per_grid]]) {
    for (uint e = gid; e < p.n; e += gsize) {
        uint c = e % p.q;
        uint row = e / p.q;
        uint i = row % p.ni;
        uint pp = row / p.ni;
        uint t = uint(idx[int(i) * p.istride]);
        dst[e] = t < p.s ? src[(pp * p.s + t) * p.q + c] : uint(INDEX_BAD);
    }
}

kernel void gather_x32(device uint* dst [[buffer(0)]],
                       const device uint* src [[buffer(1)]],
                       const device int* idx [[buffer(2)]],
                       constant IndexParams& p [[buffer(3)]],
                       uint gid [[thread_position_in_grid]],
                       uint gsize [[threads_per_grid]]) {
    for (uint e = gid; e < p.n; e += gsize) {
        uint c = e % p.q;
        uint pp = e / p.q / p.ni;
        uint t = uint(idx[e]);
        dst[e] = t < p.s ? src[(pp * p.s + t) * p.q + c] : uint(INDEX_BAD);
    }
}

// index_add_word returns a + b in the data's dtype (bit patterns in, out).
static inline uint index_add_word(uint a, uint b) {
    if (index_int) {
        return uint(int(a) + int(b));
    }
    return as_type<uint>(as_type<float>(a) + as_type<float>(b));
}

// ---------------------------------------------------------------------------
// ScatterAdd

// One thread per (p, q) column, u = pp·Q + c: neighbouring threads take
// neighbouring columns, so their accesses coalesce. dst is zeroed before.
kernel void scatter_add_x32(device uint* dst [[buffer(0)]],
                            const device uint* g [[buffer(1)]],
                            const device int* idx [[buffer(2)]],
                            constant IndexParams& p [[buffer(3)]],
                            uint gid [[thread_position_in_grid]],
                            uint gsize [[threads_per_grid]]) {
    for (uint u = gid; u < p.n; u += gsize) {
        uint c = u % p.q;
        uint pp = u / p.q;
        device uint* col = dst + pp * p.s * p.q + c;
        const device uint* gc = g + pp * p.ni * p.q + c;
        const device int* ic = idx + pp * p.ni * p.q + c;
        for (uint i = 0; i < p.ni; i++) {
            uint t = uint(ic[i * p.q]);
            if (t < p.s) {
                col[t * p.q] = index_add_word(col[t * p.q], gc[i * p.q]);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// IndexAdd

// index_sort_key is the sort key of element i (pass 0).
static inline uint index_sort_key(const device int* idx, constant IndexParams& p, uint i) {
    if (p.scatter != 0) {
        uint c = i % p.q;
        uint pp = i / p.q / p.ni;
        return (pp * p.q + c) * (p.s + 1) + min(uint(idx[i]), p.s);
    }
    return min(uint(idx[int(i) * p.istride]), p.s);
}

// index_sort_keys sorts (key, i) for the nsort elements. scratch holds four
// runs of nsort words: keys and values of buffer 0, then of buffer 1; pass k reads
// buffer (k−1) mod 2 (pass 0 reads idx, with values i) and writes buffer
// k mod 2, so the result is in buffer (npass−1) mod 2. Launched as one
// threadgroup of at most INDEX_SORT_THREADS threads (a multiple of the SIMD
// width).
kernel void index_sort_keys(const device int* idx [[buffer(0)]],
                            device uint* scratch [[buffer(1)]],
                            constant IndexParams& p [[buffer(2)]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint tsize [[threads_per_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]]) {
    // hist[d·tsize + t]: how many keys of digit d thread t holds, then
    // (after the scan) where its next one goes.
    threadgroup uint hist[INDEX_SORT_BUCKETS * INDEX_SORT_THREADS];
    threadgroup uint part[INDEX_MAX_SIMDGROUPS];

    const uint ni = p.nsort;
    const uint chunk = (ni + tsize - 1) / tsize;
    const uint lo = min(tid * chunk, ni);
    const uint hi = min(lo + chunk, ni);

    for (uint pass = 0; pass < p.npass; pass++) {
        const uint shift = pass * INDEX_SORT_BITS;
        const device uint* in_k = scratch + ((pass + 1) % 2) * 2 * ni;
        const device uint* in_v = in_k + ni;
        device uint* out_k = scratch + (pass % 2) * 2 * ni;
        device uint* out_v = out_k + ni;

        // Count this thread's digits.
        for (uint d = 0; d < INDEX_SORT_BUCKETS; d++) {
            hist[d * tsize + tid] = 0;
        }
        for (uint i = lo; i < hi; i++) {
            uint key = pass == 0 ? index_sort_key(idx, p, i) : in_k[i];
            hist[((key >> shift) & (INDEX_SORT_BUCKETS - 1)) * tsize + tid] += 1;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // Exclusive scan of hist in flat order: thread t owns the
        // INDEX_SORT_BUCKETS consecutive entries from t·INDEX_SORT_BUCKETS.
        uint run = 0;
        for (uint k = 0; k < INDEX_SORT_BUCKETS; k++) {
            run += hist[tid * INDEX_SORT_BUCKETS + k];
        }
        uint before = simd_prefix_exclusive_sum(run);
        uint total = simd_sum(run);
        if (lane == 0) {
            part[sg] = total;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < sg; k++) {
            before += part[k];
        }
        for (uint k = 0; k < INDEX_SORT_BUCKETS; k++) {
            uint c = hist[tid * INDEX_SORT_BUCKETS + k];
            hist[tid * INDEX_SORT_BUCKETS + k] = before;
            before += c;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // Scatter this thread's chunk in order.
        for (uint i = lo; i < hi; i++) {
            uint key, val;
            if (pass == 0) {
                key = index_sort_key(idx, p, i);
                val = i;
            } else {
                key = in_k[i];
                val = in_v[i];
            }
            uint h = ((key >> shift) & (INDEX_SORT_BUCKETS - 1)) * tsize + tid;
            uint pos = hist[h];
            hist[h] = pos + 1;
            out_k[pos] = key;
            out_v[pos] = val;
        }
        // The next pass reads what other threads wrote, and reuses hist.
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    }
}

// index_row_starts writes start[r] for r = 0 … nkeys: the first position in the
// sorted keys holding a key ≥ r (so row r's list is [start[r], start[r+1])).
kernel void index_row_starts(const device uint* keys [[buffer(0)]],
                             device uint* start [[buffer(1)]],
                             constant IndexParams& p [[buffer(2)]],
                             uint gid [[thread_position_in_grid]],
                             uint gsize [[threads_per_grid]]) {
    for (uint r = gid; r <= p.nkeys; r += gsize) {
        uint lo = 0;
        uint hi = p.nsort;
        while (lo < hi) {
            uint mid = lo + (hi - lo) / 2;
            if (keys[mid] < r) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        start[r] = lo;
    }
}

// index_add_x32: dst[pp, r, c] = Σ src[pp, i, c] over row r's sorted list.
kernel void index_add_x32(device uint* dst [[buffer(0)]],
                          const device uint* src [[buffer(1)]],
                          const device uint* vals [[buffer(2)]],
                          const device uint* start [[buffer(3)]],
                          constant IndexParams& p [[buffer(4)]],
                          uint gid [[thread_position_in_grid]],
                          uint gsize [[threads_per_grid]]) {
    for (uint e = gid; e < p.n; e += gsize) {
        uint c = e % p.q;
        uint row = e / p.q;
        uint r = row % p.s;
        uint pp = row / p.s;
        const device uint* sp = src + pp * p.ni * p.q + c;
        uint acc = 0u;
        uint end = start[r + 1];
        for (uint k = start[r]; k < end; k++) {
            acc = index_add_word(acc, sp[vals[k] * p.q]);
        }
        dst[e] = acc;
    }
}

// scatter_add_sorted_x32: dst[pp, r, c] = Σ g[e] over the sorted list of
// key (pp·Q + c)·(S+1) + r (elements e in increasing order, so i
// increasing).
kernel void scatter_add_sorted_x32(device uint* dst [[buffer(0)]],
                                   const device uint* g [[buffer(1)]],
                                   const device uint* vals [[buffer(2)]],
                                   const device uint* start [[buffer(3)]],
                                   constant IndexParams& p [[buffer(4)]],
                                   uint gid [[thread_position_in_grid]],
                                   uint gsize [[threads_per_grid]]) {
    for (uint e = gid; e < p.n; e += gsize) {
        uint c = e % p.q;
        uint row = e / p.q;
        uint r = row % p.s;
        uint pp = row / p.s;
        uint key = (pp * p.q + c) * (p.s + 1) + r;
        uint acc = 0u;
        uint end = start[key + 1];
        for (uint k = start[key]; k < end; k++) {
            acc = index_add_word(acc, g[vals[k]]);
        }
        dst[e] = acc;
    }
}
