//go:build amd64 && !purego

#include "textflag.h"

// func adamw32AVX512(w, gr, m, v *float32, n int, c *adamwCoefs)
//
// The AdamW update of adamwSlice, eight float64 lanes at a time: the same
// operations in the same order, without FMA (the Go loop has none on
// amd64), and m and v rounded to float32 before the step reads them, so
// the same bits. c points at adamwCoefs: b1, c1, b2, c2, invBC2Sqrt, eps,
// decay, stepSize (8 float64). The tail runs masked.
TEXT ·adamw32AVX512(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ m+16(FP), BX
	MOVQ v+24(FP), DX
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSD 0(AX), Z24  // b1
	VBROADCASTSD 8(AX), Z25  // c1
	VBROADCASTSD 16(AX), Z26 // b2
	VBROADCASTSD 24(AX), Z27 // c2
	VBROADCASTSD 32(AX), Z28 // invBC2Sqrt
	VBROADCASTSD 40(AX), Z29 // eps
	VBROADCASTSD 48(AX), Z30 // decay
	VBROADCASTSD 56(AX), Z31 // stepSize
	MOVQ $0xff, R8
	KMOVW R8, K1

loop:
	TESTQ CX, CX
	JZ done
	CMPQ CX, $8
	JGE full
	// tail mask: (1 << CX) − 1
	MOVQ $1, R8
	SHLQ CX, R8
	DECQ R8
	KMOVW R8, K1
	MOVQ CX, R9
	JMP body

full:
	MOVQ $8, R9

body:
	VMOVUPS.Z (SI), K1, Y0
	VCVTPS2PD Y0, Z0           // gi
	VMOVUPS.Z (BX), K1, Y1
	VCVTPS2PD Y1, Z1           // m
	VMOVUPS.Z (DX), K1, Y2
	VCVTPS2PD Y2, Z2           // v
	VMOVUPS.Z (DI), K1, Y3
	VCVTPS2PD Y3, Z3           // w
	// mi = float32(b1·m + c1·gi)
	VMULPD Z24, Z1, Z1
	VMULPD Z25, Z0, Z4
	VADDPD Z4, Z1, Z1
	VCVTPD2PS Z1, Y1
	VMOVUPS Y1, K1, (BX)
	VCVTPS2PD Y1, Z1
	// vi = float32(b2·v + (c2·gi)·gi)
	VMULPD Z26, Z2, Z2
	VMULPD Z27, Z0, Z4
	VMULPD Z0, Z4, Z4
	VADDPD Z4, Z2, Z2
	VCVTPD2PS Z2, Y2
	VMOVUPS Y2, K1, (DX)
	VCVTPS2PD Y2, Z2
	// denom = √vi·invBC2Sqrt + eps
	VSQRTPD Z2, Z2
	VMULPD Z28, Z2, Z2
	VADDPD Z29, Z2, Z2
	// w = float32(w·decay − (stepSize·mi)/denom)
	VMULPD Z30, Z3, Z3
	VMULPD Z31, Z1, Z1
	VDIVPD Z2, Z1, Z1
	VSUBPD Z1, Z3, Z3
	VCVTPD2PS Z3, Y3
	VMOVUPS Y3, K1, (DI)
	LEAQ (SI)(R9*4), SI
	LEAQ (BX)(R9*4), BX
	LEAQ (DX)(R9*4), DX
	LEAQ (DI)(R9*4), DI
	SUBQ R9, CX
	JMP loop

done:
	VZEROUPPER
	RET
