//go:build amd64 && !purego

#include "textflag.h"

// func packRuns32AVX512(dst, src *float32, ld, n, width, kc int)
//
// packRuns for float32 with alpha 1 (gemm.go): for each of the kc rows p
// of src (ld elements apart), its n values go width at a time (width ≤
// 32) to the slivers dst[s·kc·width + p·width :], the last one
// zero-padded to width. One masked load and one masked store of up to 32
// floats (two ZMM) a sliver: no call per run as copy makes. AVX512F only.
//
// Registers: SI, DI the row p of src and dst; AX, BX the sliver's source
// and destination; DX the values left in the row; R8 ld in bytes; R10
// width; R11 rows left; R12 a sliver's size in bytes (kc·width·4); R13
// width·4; K3, K4 the store mask of width lanes; K1, K2 the load mask.
TEXT ·packRuns32AVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ n+24(FP), R9
	MOVQ width+32(FP), R10
	MOVQ kc+40(FP), R11
	TESTQ R11, R11
	JLE done
	MOVQ R10, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K3
	SHRQ $16, AX
	KMOVW AX, K4
	MOVQ R11, R12
	IMULQ R10, R12
	SHLQ $2, R12
	MOVQ R10, R13
	SHLQ $2, R13

row:
	MOVQ SI, AX
	MOVQ DI, BX
	MOVQ R9, DX

sliver:
	TESTQ DX, DX
	JLE next
	KMOVW K3, K1
	KMOVW K4, K2
	CMPQ DX, R10
	JGE load
	MOVQ DX, CX
	MOVQ $1, R14
	SHLQ CX, R14
	DECQ R14
	KMOVW R14, K1
	SHRQ $16, R14
	KMOVW R14, K2

load:
	VMOVUPS.Z (AX), K1, Z0
	VMOVUPS.Z 64(AX), K2, Z1
	VMOVUPS Z0, K3, (BX)
	VMOVUPS Z1, K4, 64(BX)
	ADDQ R13, AX
	ADDQ R12, BX
	SUBQ R10, DX
	JMP sliver

next:
	ADDQ R8, SI
	ADDQ R13, DI
	DECQ R11
	JNZ row

done:
	VZEROUPPER
	RET
