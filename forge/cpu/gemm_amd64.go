//go:build amd64 && !purego

package cpu

import (
	"fmt"
	"os"
)

// sgemmKernel6x16 computes the 6×16 float32 tile c (row stride ldc) =
// a·b over k steps (c += a·b when accumulate), a and b packed slivers.
//
//go:noescape
func sgemmKernel6x16(k int, a, b, c *float32, ldc int, accumulate bool)

// dgemmKernel6x8 is sgemmKernel6x16 for a 6×8 float64 tile.
//
//go:noescape
func dgemmKernel6x8(k int, a, b, c *float64, ldc int, accumulate bool)

// sgemmKernel12x32 is sgemmKernel6x16 for a 12×32 tile, with AVX-512
// (gemm_avx512_amd64.s).
//
//go:noescape
func sgemmKernel12x32(k int, a, b, c *float32, ldc int, accumulate bool)

// dgemmKernel12x16 is sgemmKernel12x32 for a 12×16 float64 tile.
//
//go:noescape
func dgemmKernel12x16(k int, a, b, c *float64, ldc int, accumulate bool)

// sgemmKernel12x16of32 is sgemmKernel12x32 for the left 16 columns of the
// tile only (b is still the 32-wide sliver): the same bits for them.
//
//go:noescape
func sgemmKernel12x16of32(k int, a, b, c *float32, ldc int, accumulate bool)

// dgemmKernel12x8of16 is dgemmKernel12x16 for the left 8 columns only.
//
//go:noescape
func dgemmKernel12x8of16(k int, a, b, c *float64, ldc int, accumulate bool)

func cpuidex(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax, edx uint32)

// hasAVX2FMA reports whether the CPU has AVX2 and FMA and the OS saves the
// YMM registers.
func hasAVX2FMA() bool {
	maxLeaf, _, _, _ := cpuidex(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuidex(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv0(); xcr0&6 != 6 { // SSE and AVX state enabled
		return false
	}
	_, ebx7, _, _ := cpuidex(7, 0)
	return ebx7&(1<<5) != 0 // AVX2
}

// hasAVX512F reports whether the CPU has AVX2, FMA and AVX-512F and the OS
// saves the ZMM registers: XCR0 has the SSE, AVX, opmask, ZMM0–15 upper
// halves and ZMM16–31 states (bits 1, 2, 5, 6, 7) enabled.
func hasAVX512F() bool {
	if !hasAVX2FMA() {
		return false
	}
	if xcr0, _ := xgetbv0(); xcr0&0xE6 != 0xE6 {
		return false
	}
	_, ebx7, _, _ := cpuidex(7, 0)
	return ebx7&(1<<16) != 0 // AVX512F
}

// The assembly kernel sets. Blocking: kc·nr·size, the B sliver each tile
// of a column of tiles re-reads, in L1; mc·kc·size, the packed A block
// the tiles stream, in L2; nc·kc·size, the packed B panel, in L3.
//
// AVX-512 (both types use the same bytes): kc = 256 makes the B sliver
// 32 KiB, two thirds of the 48 KiB L1 of Intel since Ice Lake / Sapphire
// Rapids and all of Zen 4's 32 KiB (where it spills, L2 keeps up: a step
// reads 128 bytes of it per 24 FMAs); mc = 480 (240 float64) makes the A
// block 480 KiB, half of Zen 4's 1 MiB L2 and a quarter of Intel's 2 MiB;
// nc = 2048 (1024) a 2 MiB B panel, about one core's share of a server
// L3, since every goroutine packs its own. On Zen 4, kc from 192 to 384
// and mc from 240 to 960 all measured within the noise (±3 %) of each
// other at 512³, 1024³ and 2048³.
var (
	avx2Gemm = gemmKernelSet{name: "avx2", variant: "go-avx2",
		k32: gemmKernel[float32]{mr: 6, nr: 16, kc: 256, mc: 384, nc: 2048,
			fn: func(k int, a, b, c []float32, ldc int, accumulate bool) {
				sgemmKernel6x16(k, &a[0], &b[0], &c[0], ldc, accumulate)
			}},
		k64: gemmKernel[float64]{mr: 6, nr: 8, kc: 256, mc: 192, nc: 1024,
			fn: func(k int, a, b, c []float64, ldc int, accumulate bool) {
				dgemmKernel6x8(k, &a[0], &b[0], &c[0], ldc, accumulate)
			}},
	}
	avx512Gemm = gemmKernelSet{name: "avx512", variant: "go-avx512",
		k32: gemmKernel[float32]{mr: 12, nr: 32, kc: 256, mc: 480, nc: 2048,
			fn: func(k int, a, b, c []float32, ldc int, accumulate bool) {
				sgemmKernel12x32(k, &a[0], &b[0], &c[0], ldc, accumulate)
			},
			half: func(k int, a, b, c []float32, ldc int, accumulate bool) {
				sgemmKernel12x16of32(k, &a[0], &b[0], &c[0], ldc, accumulate)
			}},
		k64: gemmKernel[float64]{mr: 12, nr: 16, kc: 256, mc: 240, nc: 1024,
			fn: func(k int, a, b, c []float64, ldc int, accumulate bool) {
				dgemmKernel12x16(k, &a[0], &b[0], &c[0], ldc, accumulate)
			},
			half: func(k int, a, b, c []float64, ldc int, accumulate bool) {
				dgemmKernel12x8of16(k, &a[0], &b[0], &c[0], ldc, accumulate)
			}},
		tiles: attnTileKernels{rows8: attnTile8, rows1: attnTile1},
	}
)

// init lists the kernel sets this CPU runs (AVX-512, AVX2, portable) and
// uses the first, or the one FORGE_GEMM_KERNEL (avx512, avx2 or go) names.
// This is the one place that picks the gemm kernel.
func init() {
	var sets []gemmKernelSet
	if hasAVX512F() {
		sets = append(sets, avx512Gemm)
	}
	if hasAVX2FMA() {
		sets = append(sets, avx2Gemm)
	}
	gemmKernelSets = append(sets, gemmKernelSets...)
	use, warn := chooseGemmKernels(gemmKernelSets, os.Getenv("FORGE_GEMM_KERNEL"))
	if warn != "" {
		fmt.Fprintln(os.Stderr, warn)
	}
	setGemmKernels(use)
}
