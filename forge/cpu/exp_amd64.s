//go:build amd64 && !purego

#include "textflag.h"

// AVX2/FMA exp kernels (exp.go describes them and exp_amd64.go calls them).
// float32 inputs are widened to float64, four to a YMM register; e^a is
// computed in float64 and every result rounded to float32 once.
//
// e^a, a clamped to [−746, 710] (NaN kept): k = round(a/ln2) with the
// 1.5·2^52 shifter, r = a − k·ln2 with ln2 in two parts (the first product
// exact, |r| ≤ ln2/2), e^r by its Taylor polynomial to r^12 (truncation
// below r^13/13! < 2e-16), then 2^k applied as 2^k1·2^k2 with k1 = k>>1,
// k2 = k − k1, both factors normal, so overflow gives +Inf and underflow
// rounds gradually. k sits in the low 32 bits of the shifted value, so the
// split uses dword shifts and adds, and VPSLLQ $52 moves each biased
// exponent into place.
//
// The polynomial is evaluated as Horner's scheme in r² over the linear
// pairs q_i = c_2i + c_2i+1·r, which halves the chain of dependent FMAs,
// and every loop runs two independent chains (8 floats) per iteration:
// a single Horner chain leaves the core waiting on FMA latency.
//
// Registers while a kernel runs: Y12 710, Y13 −746, Y14 the shifter,
// Y15 1/ln2. Chain A uses Y0..Y4, chain B Y5..Y9. The last 1..3 elements
// are copied (masked) to a stack buffer and run through chain A; masked
// stores write them back.

#define EXPSETUP \
	VBROADCASTSD expHi<>(SB), Y12; \
	VBROADCASTSD expLo<>(SB), Y13; \
	VBROADCASTSD expShifter<>(SB), Y14; \
	VBROADCASTSD expLog2E<>(SB), Y15

// EXP replaces a by e^a, clobbering t, u, v, w.
#define EXP(a, t, u, v, w) \
	VMAXPD a, Y13, a; \
	VMINPD a, Y12, a; \
	VMOVAPD Y14, t; \
	VFMADD231PD a, Y15, t; \
	VSUBPD Y14, t, u; \
	VFNMADD231PD expLn2Hi<>(SB), u, a; \
	VFNMADD231PD expLn2Lo<>(SB), u, a; \
	VMULPD a, a, v; \
	VMOVUPD expC12<>(SB), u; \
	VMOVUPD expC11<>(SB), w; \
	VFMADD213PD expC10<>(SB), a, w; \
	VFMADD213PD w, v, u; \
	VMOVUPD expC9<>(SB), w; \
	VFMADD213PD expC8<>(SB), a, w; \
	VFMADD213PD w, v, u; \
	VMOVUPD expC7<>(SB), w; \
	VFMADD213PD expC6<>(SB), a, w; \
	VFMADD213PD w, v, u; \
	VMOVUPD expC5<>(SB), w; \
	VFMADD213PD expC4<>(SB), a, w; \
	VFMADD213PD w, v, u; \
	VMOVUPD expC3<>(SB), w; \
	VFMADD213PD expC2<>(SB), a, w; \
	VFMADD213PD w, v, u; \
	VADDPD expOne<>(SB), a, w; \
	VFMADD213PD w, v, u; \
	VPSRAD $1, t, w; \
	VPSUBD w, t, t; \
	VPADDD expBias<>(SB), w, w; \
	VPADDD expBias<>(SB), t, t; \
	VPSLLQ $52, w, w; \
	VPSLLQ $52, t, t; \
	VMULPD w, u, u; \
	VMULPD t, u, a

// TAILMASK loads into m a mask of the first CX (1..3) float32 lanes.
#define TAILMASK(m) \
	LEAQ expMask<>(SB), AX; \
	MOVQ $4, DX; \
	SUBQ CX, DX; \
	VMOVDQU (AX)(DX*4), m

// ---------------------------------------------------------------------------
// expShiftSumAVX2: Y11 the shift, Y10 the running sum (lanes i mod 4 of
// each chain), 0(SP) the scale (four copies), 32(SP) the tail buffer, X9
// the tail mask.

// ESUB: a = e^(x − shift) for the four floats at off(SI).
#define ESUB(a, t, u, v, w, off) \
	VCVTPS2PD off(SI), a; \
	VSUBPD Y11, a, a; \
	EXP(a, t, u, v, w)

// ESTORE: dst[off] = float32(scale·a).
#define ESTORE(a, xa, off) \
	VMULPD 0(SP), a, a; \
	VCVTPD2PSY a, xa; \
	VMOVUPS xa, off(DI)

// func expShiftSumAVX2(dst, src *float32, n int, shift, scale float64) (sum float64)
TEXT ·expShiftSumAVX2(SB), NOSPLIT, $48-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD shift+24(FP), Y11
	VBROADCASTSD scale+32(FP), Y0
	VMOVUPD Y0, 0(SP)
	EXPSETUP
	VXORPD Y10, Y10, Y10
	TESTQ DI, DI
	JZ sum8

store8:
	CMPQ CX, $8
	JLT store4
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	ESUB(Y5, Y6, Y7, Y8, Y9, 16)
	VADDPD Y0, Y10, Y10
	VADDPD Y5, Y10, Y10
	ESTORE(Y0, X0, 0)
	ESTORE(Y5, X5, 16)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP store8

store4:
	CMPQ CX, $4
	JLT storetail
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	VADDPD Y0, Y10, Y10
	ESTORE(Y0, X0, 0)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $4, CX

storetail:
	TESTQ CX, CX
	JZ hsum
	TAILMASK(X9)
	VMASKMOVPS (SI), X9, X0
	VMOVUPS X0, 32(SP)
	LEAQ 32(SP), SI
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	VPMOVSXDQ X9, Y5
	VANDPD Y5, Y0, Y6
	VADDPD Y6, Y10, Y10
	VMULPD 0(SP), Y0, Y0
	VCVTPD2PSY Y0, X0
	VMASKMOVPS X0, X9, (DI)
	JMP hsum

sum8:
	CMPQ CX, $8
	JLT sum4
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	ESUB(Y5, Y6, Y7, Y8, Y9, 16)
	VADDPD Y0, Y10, Y10
	VADDPD Y5, Y10, Y10
	ADDQ $32, SI
	SUBQ $8, CX
	JMP sum8

sum4:
	CMPQ CX, $4
	JLT sumtail
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	VADDPD Y0, Y10, Y10
	ADDQ $16, SI
	SUBQ $4, CX

sumtail:
	TESTQ CX, CX
	JZ hsum
	TAILMASK(X9)
	VMASKMOVPS (SI), X9, X0
	VMOVUPS X0, 32(SP)
	LEAQ 32(SP), SI
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	VPMOVSXDQ X9, Y5
	VANDPD Y5, Y0, Y0
	VADDPD Y0, Y10, Y10

hsum:
	// (l0 + l2) + (l1 + l3)
	VEXTRACTF128 $1, Y10, X1
	VADDPD X1, X10, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, sum+40(FP)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------

// func expShift64AVX2(dst *float64, src *float32, n int, shift float64)
TEXT ·expShift64AVX2(SB), NOSPLIT, $16-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD shift+24(FP), Y11
	EXPSETUP

e64x8:
	CMPQ CX, $8
	JLT e64x4
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	ESUB(Y5, Y6, Y7, Y8, Y9, 16)
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y5, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $8, CX
	JMP e64x8

e64x4:
	CMPQ CX, $4
	JLT e64tail
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	VMOVUPD Y0, 0(DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $4, CX

e64tail:
	TESTQ CX, CX
	JZ e64done
	TAILMASK(X10)
	VMASKMOVPS (SI), X10, X0
	VMOVUPS X0, 0(SP)
	LEAQ 0(SP), SI
	ESUB(Y0, Y1, Y2, Y3, Y4, 0)
	VPMOVSXDQ X10, Y5
	VMASKMOVPD Y0, Y5, (DI)

e64done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// sigmoid32AVX2: SI x, BX g, DI dst, CX count. Each body leaves its result
// in a, reading x (and g) again from memory where it needs them; the tail
// runs on copies at 0(SP) (x) and 16(SP) (g).

// a = −x
#define LOADNEG(a, off) \
	VCVTPS2PD off(SI), a; \
	VXORPD expSignMask<>(SB), a, a

// a = 1/(1 + a)
#define RECIP1P(a, t) \
	VADDPD expOne<>(SB), a, a; \
	VMOVUPD expOne<>(SB), t; \
	VDIVPD a, t, a

// 1/(1 + e^−x)
#define SIGMOID(a, t, u, v, w, off) \
	LOADNEG(a, off); \
	EXP(a, t, u, v, w); \
	RECIP1P(a, t)

// x/(1 + e^−x)
#define SILU(a, t, u, v, w, off) \
	LOADNEG(a, off); \
	EXP(a, t, u, v, w); \
	VADDPD expOne<>(SB), a, a; \
	VCVTPS2PD off(SI), t; \
	VDIVPD a, t, a

// a = −2u = x·(−2k − 2kc·x²), u = k(x + c x³)
#define GELUARG(a, t, u, off) \
	VCVTPS2PD off(SI), t; \
	VMULPD t, t, a; \
	VMOVUPD expGeluA<>(SB), u; \
	VFMADD213PD expGeluB<>(SB), u, a; \
	VMULPD t, a, a

// x/(1 + e^−2u)
#define GELU(a, t, u, v, w, off) \
	GELUARG(a, t, u, off); \
	EXP(a, t, u, v, w); \
	VADDPD expOne<>(SB), a, a; \
	VCVTPS2PD off(SI), t; \
	VDIVPD a, t, a

// |x| < 1/32: x(1 − x²(1/3 − x²(2/15 − x²·17/315)));
// otherwise sign(x)·(1 − 2/(1 + e^(2|x|))).
#define TANH(a, t, u, v, w, off) \
	VCVTPS2PD off(SI), a; \
	VANDPD expAbsMask<>(SB), a, a; \
	VADDPD a, a, a; \
	EXP(a, t, u, v, w); \
	VADDPD expOne<>(SB), a, a; \
	VMOVUPD expTwo<>(SB), t; \
	VDIVPD a, t, a; \
	VMOVUPD expOne<>(SB), t; \
	VSUBPD a, t, a; \
	VCVTPS2PD off(SI), t; \
	VANDPD expSignMask<>(SB), t, u; \
	VORPD u, a, a; \
	VMULPD t, t, u; \
	VMOVUPD expT7<>(SB), v; \
	VFNMADD213PD expT5<>(SB), u, v; \
	VFNMADD213PD expT3<>(SB), u, v; \
	VFNMADD213PD expOne<>(SB), u, v; \
	VMULPD t, v, v; \
	VANDPD expAbsMask<>(SB), t, w; \
	VCMPPD $1, expTanhCut<>(SB), w, w; \
	VBLENDVPD w, v, a, a

// g·σ·(1 + x(1 − σ)), σ = 1/(1 + e^−x)
#define SILUGRAD(a, t, u, v, w, off) \
	SIGMOID(a, t, u, v, w, off); \
	VMOVUPD expOne<>(SB), t; \
	VSUBPD a, t, u; \
	VCVTPS2PD off(SI), v; \
	VFMADD213PD expOne<>(SB), v, u; \
	VCVTPS2PD off(BX), w; \
	VMULPD a, w, a; \
	VMULPD u, a, a

// g·(σ + 2x·σ(1 − σ)·k(1 + 3c x²)), σ = 1/(1 + e^−2u)
#define GELUGRAD(a, t, u, v, w, off) \
	GELUARG(a, t, u, off); \
	EXP(a, t, u, v, w); \
	RECIP1P(a, t); \
	VMOVUPD expOne<>(SB), t; \
	VSUBPD a, t, t; \
	VCVTPS2PD off(SI), v; \
	VMULPD v, v, u; \
	VMOVUPD expGelu3C<>(SB), w; \
	VFMADD213PD expOne<>(SB), w, u; \
	VMULPD expGelu2K<>(SB), u, u; \
	VMULPD v, a, v; \
	VMULPD t, v, v; \
	VMULPD u, v, v; \
	VADDPD a, v, v; \
	VCVTPS2PD off(BX), w; \
	VMULPD v, w, a

// SIGLOOP runs body over the n elements: two chains while 8 remain, one
// for 4, one on the masked stack copy for the last 1..3.
#define SIGLOOP(body, l8, l4, ltail) \
l8: \
	CMPQ CX, $8; \
	JLT l4; \
	body(Y0, Y1, Y2, Y3, Y4, 0); \
	body(Y5, Y6, Y7, Y8, Y9, 16); \
	VCVTPD2PSY Y0, X0; \
	VMOVUPS X0, 0(DI); \
	VCVTPD2PSY Y5, X5; \
	VMOVUPS X5, 16(DI); \
	ADDQ $32, SI; \
	ADDQ $32, BX; \
	ADDQ $32, DI; \
	SUBQ $8, CX; \
	JMP l8; \
l4: \
	CMPQ CX, $4; \
	JLT ltail; \
	body(Y0, Y1, Y2, Y3, Y4, 0); \
	VCVTPD2PSY Y0, X0; \
	VMOVUPS X0, 0(DI); \
	ADDQ $16, SI; \
	ADDQ $16, BX; \
	ADDQ $16, DI; \
	SUBQ $4, CX; \
ltail: \
	TESTQ CX, CX; \
	JZ sigdone; \
	TAILMASK(X10); \
	VMASKMOVPS (SI), X10, X0; \
	VMOVUPS X0, 0(SP); \
	LEAQ 0(SP), SI; \
	VMASKMOVPS (BX), X10, X0; \
	VMOVUPS X0, 16(SP); \
	LEAQ 16(SP), BX; \
	body(Y0, Y1, Y2, Y3, Y4, 0); \
	VCVTPD2PSY Y0, X0; \
	VMASKMOVPS X0, X10, (DI); \
	JMP sigdone

// func sigmoid32AVX2(op int, dst, x, gr *float32, n int)
// op is one of the sig* constants of exp.go; gr must be readable (the
// caller passes x for the forward ops).
TEXT ·sigmoid32AVX2(SB), NOSPLIT, $32-40
	MOVQ op+0(FP), R8
	MOVQ dst+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ gr+24(FP), BX
	MOVQ n+32(FP), CX
	EXPSETUP
	CMPQ R8, $0
	JEQ sigmoid8
	CMPQ R8, $1
	JEQ silu8
	CMPQ R8, $2
	JEQ gelu8
	CMPQ R8, $3
	JEQ tanh8
	CMPQ R8, $4
	JEQ silugrad8
	CMPQ R8, $5
	JEQ gelugrad8
	JMP sigdone

	SIGLOOP(SIGMOID, sigmoid8, sigmoid4, sigmoidtail)
	SIGLOOP(SILU, silu8, silu4, silutail)
	SIGLOOP(GELU, gelu8, gelu4, gelutail)
	SIGLOOP(TANH, tanh8, tanh4, tanhtail)
	SIGLOOP(SILUGRAD, silugrad8, silugrad4, silugradtail)
	SIGLOOP(GELUGRAD, gelugrad8, gelugrad4, gelugradtail)

sigdone:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Constants.

// Broadcast by EXPSETUP.
DATA expHi<>+0(SB)/8, $0x4086300000000000 // 710
GLOBL expHi<>(SB), RODATA|NOPTR, $8
DATA expLo<>+0(SB)/8, $0xc087500000000000 // −746
GLOBL expLo<>(SB), RODATA|NOPTR, $8
DATA expShifter<>+0(SB)/8, $0x4338000000000000 // 1.5·2^52
GLOBL expShifter<>(SB), RODATA|NOPTR, $8
DATA expLog2E<>+0(SB)/8, $0x3ff71547652b82fe // 1/ln2
GLOBL expLog2E<>(SB), RODATA|NOPTR, $8

// Memory operands of 256-bit ops: four copies each.
#define CONST4(name, bits) \
	DATA name+0(SB)/8, $bits; \
	DATA name+8(SB)/8, $bits; \
	DATA name+16(SB)/8, $bits; \
	DATA name+24(SB)/8, $bits; \
	GLOBL name(SB), RODATA|NOPTR, $32

CONST4(expLn2Hi<>, 0x3fe62e42fefa39ef) // ln2 rounded to float64
CONST4(expLn2Lo<>, 0x3c7abc9e3b39803f) // ln2 − expLn2Hi
CONST4(expBias<>, 0x000003ff000003ff)  // 1023 in each dword
CONST4(expOne<>, 0x3ff0000000000000)
CONST4(expTwo<>, 0x4000000000000000)
CONST4(expC2<>, 0x3fe0000000000000)    // 1/2!
CONST4(expC3<>, 0x3fc5555555555555)    // 1/3!
CONST4(expC4<>, 0x3fa5555555555555)
CONST4(expC5<>, 0x3f81111111111111)
CONST4(expC6<>, 0x3f56c16c16c16c17)
CONST4(expC7<>, 0x3f2a01a01a01a01a)
CONST4(expC8<>, 0x3efa01a01a01a01a)
CONST4(expC9<>, 0x3ec71de3a556c734)
CONST4(expC10<>, 0x3e927e4fb7789f5c)
CONST4(expC11<>, 0x3e5ae64567f544e4)
CONST4(expC12<>, 0x3e21eed8eff8d898)      // 1/12!
CONST4(expAbsMask<>, 0x7fffffffffffffff)
CONST4(expSignMask<>, 0x8000000000000000)
CONST4(expTanhCut<>, 0x3fa0000000000000)  // 1/32
CONST4(expT3<>, 0x3fd5555555555555)       // 1/3
CONST4(expT5<>, 0x3fc1111111111111)       // 2/15
CONST4(expT7<>, 0x3faba1ba1ba1ba1c)       // 17/315
CONST4(expGeluA<>, 0xbfb2444f2a4d8b4b)    // −2·√(2/π)·0.044715
CONST4(expGeluB<>, 0xbff9884533d43651)    // −2·√(2/π)
CONST4(expGelu2K<>, 0x3ff9884533d43651)   // 2·√(2/π)
CONST4(expGelu3C<>, 0x3fc12ba9d1f60179)   // 3·0.044715

// expMask: four all-ones dwords then four zeros; 16 bytes from offset
// 4·(4 − m) enable the first m lanes.
DATA expMask<>+0(SB)/8, $0xffffffffffffffff
DATA expMask<>+8(SB)/8, $0xffffffffffffffff
DATA expMask<>+16(SB)/8, $0
DATA expMask<>+24(SB)/8, $0
GLOBL expMask<>(SB), RODATA|NOPTR, $32
