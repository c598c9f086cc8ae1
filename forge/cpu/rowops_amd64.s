//go:build amd64 && !purego

#include "textflag.h"

// AVX2/FMA float32 row primitives (rowops.go describes them and
// rowops_amd64.go calls them). Sums are kept in float64 lanes: float32
// values are widened four to a YMM register, and a product of two widened
// float32 values is exact in float64, so an FMA adds it with one rounding,
// as the Go loop's multiply and add do. Every loop body handles 16
// elements in four independent accumulators (or stores), then 4 at a time,
// then one at a time; the order of the additions depends only on n.

// func rowMax32AVX2(x *float32, n int) float32
//
// m = (v > m) ? v : m per lane: VMAXPS returns its second source when
// either operand is NaN, so with the running max as that source NaNs are
// skipped. The lanes start at −Inf and are combined at the end.
TEXT ·rowMax32AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS rowNegInf<>(SB), Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3

max32:
	CMPQ CX, $32
	JLT  max8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ $128, SI
	SUBQ $32, CX
	JMP  max32

max8:
	CMPQ CX, $8
	JLT  maxfold
	VMOVUPS (SI), Y4
	VMAXPS Y0, Y4, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  max8

maxfold:
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0

max1:
	TESTQ CX, CX
	JEQ   maxdone
	VMOVSS (SI), X4
	VMAXSS X0, X4, X0
	ADDQ $4, SI
	DECQ CX
	JMP  max1

maxdone:
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dot32AVX2(a, b *float32, n int) float64
TEXT ·dot32AVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3

dot16:
	CMPQ CX, $16
	JLT  dot4
	VCVTPS2PD (SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VCVTPS2PD (DI), Y8
	VCVTPS2PD 16(DI), Y9
	VCVTPS2PD 32(DI), Y10
	VCVTPS2PD 48(DI), Y11
	VFMADD231PD Y8, Y4, Y0
	VFMADD231PD Y9, Y5, Y1
	VFMADD231PD Y10, Y6, Y2
	VFMADD231PD Y11, Y7, Y3
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  dot16

dot4:
	CMPQ CX, $4
	JLT  dotfold
	VCVTPS2PD (SI), Y4
	VCVTPS2PD (DI), Y8
	VFMADD231PD Y8, Y4, Y0
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $4, CX
	JMP  dot4

dotfold:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0

dot1:
	TESTQ CX, CX
	JEQ   dotdone
	VCVTSS2SD (SI), X4, X4
	VCVTSS2SD (DI), X8, X8
	VFMADD231SD X8, X4, X0
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP  dot1

dotdone:
	VZEROUPPER
	MOVSD X0, ret+24(FP)
	RET

// func scale32AVX2(dst, src *float32, n int, a float64)
//
// dst_i = float32(float64(src_i)·a).
TEXT ·scale32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD a+24(FP), Y15

sc16:
	CMPQ CX, $16
	JLT  sc4
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 32(SI), Y2
	VCVTPS2PD 48(SI), Y3
	VMULPD Y15, Y0, Y0
	VMULPD Y15, Y1, Y1
	VMULPD Y15, Y2, Y2
	VMULPD Y15, Y3, Y3
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VCVTPD2PSY Y2, X2
	VCVTPD2PSY Y3, X3
	VMOVUPS X0, (DI)
	VMOVUPS X1, 16(DI)
	VMOVUPS X2, 32(DI)
	VMOVUPS X3, 48(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  sc16

sc4:
	CMPQ CX, $4
	JLT  sc1
	VCVTPS2PD (SI), Y0
	VMULPD Y15, Y0, Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $4, CX
	JMP  sc4

sc1:
	TESTQ CX, CX
	JEQ   scdone
	VCVTSS2SD (SI), X0, X0
	VMULSD X15, X0, X0
	VCVTSD2SS X0, X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP  sc1

scdone:
	VZEROUPPER
	RET

// func scaleMul32AVX2(dst, x, w *float32, n int, a float64)
//
// dst_i = float32(float64(x_i)·a·float64(w_i)), the products in that order.
TEXT ·scaleMul32AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSD a+32(FP), Y15

sm16:
	CMPQ CX, $16
	JLT  sm4
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 32(SI), Y2
	VCVTPS2PD 48(SI), Y3
	VCVTPS2PD (DX), Y4
	VCVTPS2PD 16(DX), Y5
	VCVTPS2PD 32(DX), Y6
	VCVTPS2PD 48(DX), Y7
	VMULPD Y15, Y0, Y0
	VMULPD Y15, Y1, Y1
	VMULPD Y15, Y2, Y2
	VMULPD Y15, Y3, Y3
	VMULPD Y4, Y0, Y0
	VMULPD Y5, Y1, Y1
	VMULPD Y6, Y2, Y2
	VMULPD Y7, Y3, Y3
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VCVTPD2PSY Y2, X2
	VCVTPD2PSY Y3, X3
	VMOVUPS X0, (DI)
	VMOVUPS X1, 16(DI)
	VMOVUPS X2, 32(DI)
	VMOVUPS X3, 48(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  sm16

sm4:
	CMPQ CX, $4
	JLT  sm1
	VCVTPS2PD (SI), Y0
	VCVTPS2PD (DX), Y4
	VMULPD Y15, Y0, Y0
	VMULPD Y4, Y0, Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, SI
	ADDQ $16, DX
	ADDQ $16, DI
	SUBQ $4, CX
	JMP  sm4

sm1:
	TESTQ CX, CX
	JEQ   smdone
	VCVTSS2SD (SI), X0, X0
	VCVTSS2SD (DX), X4, X4
	VMULSD X15, X0, X0
	VMULSD X4, X0, X0
	VCVTSD2SS X0, X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, SI
	ADDQ $4, DX
	ADDQ $4, DI
	DECQ CX
	JMP  sm1

smdone:
	VZEROUPPER
	RET

DATA rowNegInf<>+0(SB)/4, $0xff800000
GLOBL rowNegInf<>(SB), RODATA|NOPTR, $4
