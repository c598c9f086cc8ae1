//go:build amd64 && !purego

#include "textflag.h"

// AVX2/FMA float32 rows of the RMSNorm backward (normrow.go describes
// them). float32 values are widened four to a YMM register and every
// product and sum is formed in float64, like the Go loops. n is a
// multiple of 4 (the callers do the tail in Go).

// func dot3x32AVX2(a, b, c *float32, n int) float64
//
// Σ_j (a_j·b_j)·c_j: a_j·b_j is exact in float64, then an FMA adds its
// product with c_j. Two accumulators (8 elements a step), then 4.
TEXT ·dot3x32AVX2(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ c+16(FP), DX
	MOVQ n+24(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1

d8:
	CMPQ CX, $8
	JLT  d4
	VCVTPS2PD (SI), Y2
	VCVTPS2PD (DI), Y3
	VCVTPS2PD (DX), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 16(DI), Y6
	VCVTPS2PD 16(DX), Y7
	VMULPD Y3, Y2, Y2
	VMULPD Y6, Y5, Y5
	VFMADD231PD Y4, Y2, Y0
	VFMADD231PD Y7, Y5, Y1
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  d8

d4:
	CMPQ CX, $4
	JLT  dfold
	VCVTPS2PD (SI), Y2
	VCVTPS2PD (DI), Y3
	VCVTPS2PD (DX), Y4
	VMULPD Y3, Y2, Y2
	VFMADD231PD Y4, Y2, Y0

dfold:
	VADDPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VPERMILPD $1, X0, X1
	VADDSD X1, X0, X0
	VZEROUPPER
	MOVSD X0, ret+32(FP)
	RET

// func rmsBackRow32AVX2(dx, dy, x, w *float32, pw *float64, n int, rstd, k float64)
//
// pw_j += (dy_j·x_j)·rstd (an FMA after an exact product) and
// dx_j = float32(rstd·(dy_j·w_j − x_j·k)), 4 elements a step.
TEXT ·rmsBackRow32AVX2(SB), NOSPLIT, $0-64
	MOVQ dx+0(FP), R8
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DI
	MOVQ w+24(FP), DX
	MOVQ pw+32(FP), R9
	MOVQ n+40(FP), CX
	VBROADCASTSD rstd+48(FP), Y8
	VBROADCASTSD k+56(FP), Y9

r4:
	CMPQ CX, $4
	JLT  rdone
	VCVTPS2PD (SI), Y0
	VCVTPS2PD (DI), Y1
	VCVTPS2PD (DX), Y2
	VMULPD Y1, Y0, Y3
	VMOVUPD (R9), Y4
	VFMADD231PD Y8, Y3, Y4
	VMOVUPD Y4, (R9)
	VMULPD Y2, Y0, Y5
	VMULPD Y9, Y1, Y6
	VSUBPD Y6, Y5, Y5
	VMULPD Y8, Y5, Y5
	VCVTPD2PSY Y5, X5
	VMOVUPS X5, (R8)
	ADDQ $16, R8
	ADDQ $16, SI
	ADDQ $16, DI
	ADDQ $16, DX
	ADDQ $32, R9
	SUBQ $4, CX
	JMP  r4

rdone:
	VZEROUPPER
	RET

// func ropeRow32AVX512(y, x *float32, cc, ss *float64, n int)
//
// One RoPE row, n a multiple of 8: with x widened to float64 pairs (a, b)
// and their swap (b, a), y = float32(x·cc + swap(x)·ss), which is
// (a·c − b·s, b·c + a·s): the products and sum of ropeForward, in float64.
TEXT ·ropeRow32AVX512(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ cc+16(FP), BX
	MOVQ ss+24(FP), DX
	MOVQ n+32(FP), CX

rope8:
	CMPQ CX, $8
	JLT  ropedone
	VCVTPS2PD (SI), Z0
	VPERMILPD $0x55, Z0, Z1
	VMULPD (BX), Z0, Z0
	VMULPD (DX), Z1, Z1
	VADDPD Z1, Z0, Z0
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $64, BX
	ADDQ $64, DX
	SUBQ $8, CX
	JMP  rope8

ropedone:
	VZEROUPPER
	RET
