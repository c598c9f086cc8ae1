package emu

import (
	"testing"
)

// TestHeaderInclude: a .metal file includes a header (another source)
// whose helper declares threadgroup memory and uses simd functions.
func TestHeaderInclude(t *testing.T) {
	if _, _, err := findClang(); err != nil {
		t.Skip(err)
	}
	src := map[string]string{
		"reduce_util.h": `#pragma once
#include <metal_stdlib>
using namespace metal;
// block_sum sums v over the threadgroup (all threads must call it).
inline float block_sum(float v, uint tid, uint nsg) {
    threadgroup float part[32];
    v = simd_sum(v);
    if (tid % 32 == 0) part[tid / 32] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = 0;
    for (uint i = 0; i < nsg; i++) s += part[i];
    return s;
}
`,
		"use.metal": `#include "reduce_util.h"
kernel void total(device const float* x [[buffer(0)]],
                  device float* out [[buffer(1)]],
                  uint tid [[thread_index_in_threadgroup]],
                  uint nsg [[simdgroups_per_threadgroup]]) {
    float s = block_sum(x[tid], tid, nsg);
    if (tid == 0) out[0] = s;
}
`,
	}
	d, err := Open(src, Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 100)
	want := float32(0)
	for i := range x {
		x[i] = float32(i)
		want += x[i]
	}
	bx := f32buf(t, d, x)
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, []float32{-1}) // each schedule must write it
		if err := run(d, pipe(t, d, "total"), [3]int{1, 1, 1}, [3]int{100, 1, 1}, bufArg(bx), bufArg(out)); err != nil {
			t.Fatal(err)
		}
		if got := f32s(out)[0]; got != want {
			t.Fatalf("%s: %v, want %v", sched, got, want)
		}
	})
}
