//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 versions of the kernels of exp_amd64.s, for CPUs with AVX512F,
// AVX512VL (and so masked 256-bit moves): eight float64 lanes per ZMM
// register, the same results to the last bit in practice (both are within
// a few 1e-16 before the rounding to float32; the tests compare them).
//
// e^a, a clamped to [−746, 710] (NaN kept): k = round(8a/ln2) with the
// 1.5·2^52 shifter, r = a − k·ln2/8 with ln2/8 in two parts (|r| ≤ ln2/16),
// e^r by its Taylor polynomial to r^8 (truncation below r^9/9! < 2e-18),
// evaluated as Horner's scheme in r² over linear pairs. Then
// e^a = 2^(k>>3) · 2^((k&7)/8) · e^r: VPERMPD picks 2^(j/8) from an
// 8-entry table with the low three bits of the shifted value as index, and
// VSCALEFPD multiplies by 2^floor(k/8) with a single rounding, overflowing
// to +Inf and underflowing gradually.
//
// Registers while a kernel runs: Z12 710, Z13 −746, Z14 the shifter,
// Z15 8/ln2, Z16 the table, Z17 1.0. Chain A uses Z0..Z5, chain B
// Z6..Z11. Loops run two chains (16 floats) per iteration, then 8 at a
// time with a mask in K1 for the rest.

#define E8SETUP \
	VBROADCASTSD e8Hi<>(SB), Z12; \
	VBROADCASTSD e8Lo<>(SB), Z13; \
	VBROADCASTSD e8Shifter<>(SB), Z14; \
	VBROADCASTSD e8Log2E<>(SB), Z15; \
	VMOVUPD e8Tab<>(SB), Z16; \
	VBROADCASTSD e8One<>(SB), Z17

// EXP8 replaces a by e^a, clobbering t, u, v, w, q.
#define EXP8(a, t, u, v, w, q) \
	VMAXPD a, Z13, a; \
	VMINPD a, Z12, a; \
	VMOVAPD Z14, t; \
	VFMADD231PD a, Z15, t; \
	VSUBPD Z14, t, u; \
	VFNMADD231PD.BCST e8Ln2Hi<>(SB), u, a; \
	VFNMADD231PD.BCST e8Ln2Lo<>(SB), u, a; \
	VPERMPD Z16, t, w; \
	VMULPD.BCST e8Eighth<>(SB), u, u; \
	VMULPD a, a, v; \
	VBROADCASTSD e8C8<>(SB), t; \
	VBROADCASTSD e8C7<>(SB), q; \
	VFMADD213PD.BCST e8C6<>(SB), a, q; \
	VFMADD213PD q, v, t; \
	VBROADCASTSD e8C5<>(SB), q; \
	VFMADD213PD.BCST e8C4<>(SB), a, q; \
	VFMADD213PD q, v, t; \
	VBROADCASTSD e8C3<>(SB), q; \
	VFMADD213PD.BCST e8C2<>(SB), a, q; \
	VFMADD213PD q, v, t; \
	VADDPD Z17, a, q; \
	VFMADD213PD q, v, t; \
	VMULPD w, t, t; \
	VSCALEFPD u, t, a

// TAILMASK8 sets AX = min(CX, 8) and K1 to the mask of the first AX lanes.
#define TAILMASK8 \
	MOVQ $8, AX; \
	CMPQ CX, AX; \
	CMOVQLT CX, AX; \
	LEAQ e8Masks<>(SB), DX; \
	MOVBLZX (DX)(AX*1), DX; \
	KMOVW DX, K1

// ---------------------------------------------------------------------------
// expShiftSumAVX512: Z20 the shift, Z21 the scale, Z22 the running sum
// (lanes i mod 8 of each chain).

// func expShiftSumAVX512(dst, src *float32, n int, shift, scale float64) (sum float64)
TEXT ·expShiftSumAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD shift+24(FP), Z20
	VBROADCASTSD scale+32(FP), Z21
	E8SETUP
	VPXORQ Z22, Z22, Z22
	TESTQ DI, DI
	JZ sum16

store16:
	CMPQ CX, $16
	JLT storetail
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z6
	VSUBPD Z20, Z0, Z0
	VSUBPD Z20, Z6, Z6
	EXP8(Z0, Z1, Z2, Z3, Z4, Z5)
	EXP8(Z6, Z7, Z8, Z9, Z10, Z11)
	VADDPD Z0, Z22, Z22
	VADDPD Z6, Z22, Z22
	VMULPD Z21, Z0, Z0
	VMULPD Z21, Z6, Z6
	VCVTPD2PS Z0, Y0
	VCVTPD2PS Z6, Y6
	VMOVUPS Y0, (DI)
	VMOVUPS Y6, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP store16

storetail:
	TESTQ CX, CX
	JZ hsum
	TAILMASK8
	VMOVUPS.Z (SI), K1, Y0
	VCVTPS2PD Y0, Z0
	VSUBPD Z20, Z0, Z0
	EXP8(Z0, Z1, Z2, Z3, Z4, Z5)
	VADDPD Z0, Z22, K1, Z22
	VMULPD Z21, Z0, Z0
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, K1, (DI)
	LEAQ (SI)(AX*4), SI
	LEAQ (DI)(AX*4), DI
	SUBQ AX, CX
	JMP storetail

sum16:
	CMPQ CX, $16
	JLT sumtail
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z6
	VSUBPD Z20, Z0, Z0
	VSUBPD Z20, Z6, Z6
	EXP8(Z0, Z1, Z2, Z3, Z4, Z5)
	EXP8(Z6, Z7, Z8, Z9, Z10, Z11)
	VADDPD Z0, Z22, Z22
	VADDPD Z6, Z22, Z22
	ADDQ $64, SI
	SUBQ $16, CX
	JMP sum16

sumtail:
	TESTQ CX, CX
	JZ hsum
	TAILMASK8
	VMOVUPS.Z (SI), K1, Y0
	VCVTPS2PD Y0, Z0
	VSUBPD Z20, Z0, Z0
	EXP8(Z0, Z1, Z2, Z3, Z4, Z5)
	VADDPD Z0, Z22, K1, Z22
	LEAQ (SI)(AX*4), SI
	SUBQ AX, CX
	JMP sumtail

hsum:
	// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
	VEXTRACTF64X4 $1, Z22, Y1
	VADDPD Y1, Y22, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, sum+40(FP)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------

// func expShift64AVX512(dst *float64, src *float32, n int, shift float64)
TEXT ·expShift64AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD shift+24(FP), Z20
	E8SETUP

e64x16:
	CMPQ CX, $16
	JLT e64tail
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z6
	VSUBPD Z20, Z0, Z0
	VSUBPD Z20, Z6, Z6
	EXP8(Z0, Z1, Z2, Z3, Z4, Z5)
	EXP8(Z6, Z7, Z8, Z9, Z10, Z11)
	VMOVUPD Z0, (DI)
	VMOVUPD Z6, 64(DI)
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $16, CX
	JMP e64x16

e64tail:
	TESTQ CX, CX
	JZ e64done
	TAILMASK8
	VMOVUPS.Z (SI), K1, Y0
	VCVTPS2PD Y0, Z0
	VSUBPD Z20, Z0, Z0
	EXP8(Z0, Z1, Z2, Z3, Z4, Z5)
	VMOVUPD Z0, K1, (DI)
	LEAQ (SI)(AX*4), SI
	LEAQ (DI)(AX*8), DI
	SUBQ AX, CX
	JMP e64tail

e64done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// sigmoid32AVX512: SI x, BX g, DI dst, CX count. Bodies take x in xr and g
// in gr (kept), leave the result in a and may clobber t..q and K2.

// a = 1/(1 + a)
#define RECIP1P8(a, t) \
	VADDPD Z17, a, a; \
	VDIVPD a, Z17, a

#define SIGMOID8(a, t, u, v, w, q, xr, gr) \
	VPXORQ.BCST e8SignMask<>(SB), xr, a; \
	EXP8(a, t, u, v, w, q); \
	RECIP1P8(a, t)

#define SILU8(a, t, u, v, w, q, xr, gr) \
	VPXORQ.BCST e8SignMask<>(SB), xr, a; \
	EXP8(a, t, u, v, w, q); \
	VADDPD Z17, a, a; \
	VDIVPD a, xr, a

// a = −2u = x·(−2k − 2kc·x²)
#define GELUARG8(a, t, xr) \
	VMULPD xr, xr, a; \
	VBROADCASTSD e8GeluA<>(SB), t; \
	VFMADD213PD.BCST e8GeluB<>(SB), t, a; \
	VMULPD xr, a, a

#define GELU8(a, t, u, v, w, q, xr, gr) \
	GELUARG8(a, t, xr); \
	EXP8(a, t, u, v, w, q); \
	VADDPD Z17, a, a; \
	VDIVPD a, xr, a

#define TANH8(a, t, u, v, w, q, xr, gr) \
	VPANDQ.BCST e8AbsMask<>(SB), xr, a; \
	VADDPD a, a, a; \
	EXP8(a, t, u, v, w, q); \
	VADDPD Z17, a, a; \
	VBROADCASTSD e8Two<>(SB), t; \
	VDIVPD a, t, a; \
	VSUBPD a, Z17, a; \
	VPANDQ.BCST e8SignMask<>(SB), xr, u; \
	VPORQ u, a, a; \
	VMULPD xr, xr, u; \
	VBROADCASTSD e8T7<>(SB), v; \
	VFNMADD213PD.BCST e8T5<>(SB), u, v; \
	VFNMADD213PD.BCST e8T3<>(SB), u, v; \
	VFNMADD213PD Z17, u, v; \
	VMULPD xr, v, v; \
	VPANDQ.BCST e8AbsMask<>(SB), xr, w; \
	VCMPPD.BCST $1, e8TanhCut<>(SB), w, K2; \
	VMOVAPD v, K2, a

#define SILUGRAD8(a, t, u, v, w, q, xr, gr) \
	SIGMOID8(a, t, u, v, w, q, xr, gr); \
	VSUBPD a, Z17, u; \
	VFMADD213PD Z17, xr, u; \
	VMULPD a, gr, a; \
	VMULPD u, a, a

#define GELUGRAD8(a, t, u, v, w, q, xr, gr) \
	GELUARG8(a, t, xr); \
	EXP8(a, t, u, v, w, q); \
	RECIP1P8(a, t); \
	VSUBPD a, Z17, t; \
	VMULPD xr, xr, u; \
	VBROADCASTSD e8Gelu3C<>(SB), w; \
	VFMADD213PD Z17, w, u; \
	VMULPD.BCST e8Gelu2K<>(SB), u, u; \
	VMULPD xr, a, v; \
	VMULPD t, v, v; \
	VMULPD u, v, v; \
	VADDPD a, v, v; \
	VMULPD v, gr, a

// SIGLOOP8: two chains while 16 remain (x in Z18/Z19, g in Z20/Z21), then
// masked blocks of up to 8.
#define SIGLOOP8(body, l16, ltail) \
l16: \
	CMPQ CX, $16; \
	JLT ltail; \
	VCVTPS2PD (SI), Z18; \
	VCVTPS2PD 32(SI), Z19; \
	VCVTPS2PD (BX), Z20; \
	VCVTPS2PD 32(BX), Z21; \
	body(Z0, Z1, Z2, Z3, Z4, Z5, Z18, Z20); \
	body(Z6, Z7, Z8, Z9, Z10, Z11, Z19, Z21); \
	VCVTPD2PS Z0, Y0; \
	VMOVUPS Y0, (DI); \
	VCVTPD2PS Z6, Y6; \
	VMOVUPS Y6, 32(DI); \
	ADDQ $64, SI; \
	ADDQ $64, BX; \
	ADDQ $64, DI; \
	SUBQ $16, CX; \
	JMP l16; \
ltail: \
	TESTQ CX, CX; \
	JZ sig8done; \
	TAILMASK8; \
	VMOVUPS.Z (SI), K1, Y18; \
	VCVTPS2PD Y18, Z18; \
	VMOVUPS.Z (BX), K1, Y20; \
	VCVTPS2PD Y20, Z20; \
	body(Z0, Z1, Z2, Z3, Z4, Z5, Z18, Z20); \
	VCVTPD2PS Z0, Y0; \
	VMOVUPS Y0, K1, (DI); \
	LEAQ (SI)(AX*4), SI; \
	LEAQ (BX)(AX*4), BX; \
	LEAQ (DI)(AX*4), DI; \
	SUBQ AX, CX; \
	JMP ltail

// func sigmoid32AVX512(op int, dst, x, gr *float32, n int)
TEXT ·sigmoid32AVX512(SB), NOSPLIT, $0-40
	MOVQ op+0(FP), R8
	MOVQ dst+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ gr+24(FP), BX
	MOVQ n+32(FP), CX
	E8SETUP
	CMPQ R8, $0
	JEQ sigmoid16
	CMPQ R8, $1
	JEQ silu16
	CMPQ R8, $2
	JEQ gelu16
	CMPQ R8, $3
	JEQ tanh16
	CMPQ R8, $4
	JEQ silugrad16
	CMPQ R8, $5
	JEQ gelugrad16
	JMP sig8done

	SIGLOOP8(SIGMOID8, sigmoid16, sigmoidtail)
	SIGLOOP8(SILU8, silu16, silutail)
	SIGLOOP8(GELU8, gelu16, gelutail)
	SIGLOOP8(TANH8, tanh16, tanhtail)
	SIGLOOP8(SILUGRAD8, silugrad16, silugradtail)
	SIGLOOP8(GELUGRAD8, gelugrad16, gelugradtail)

sig8done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// The SwiGLU gate (fused.go), forward and backward, one pass each: the
// same operations as the composition of sigmoid32 (SILU8, SILUGRAD8) and
// float32 products, so the same bits, but one exp per element (the
// backward's silu(a) and σ(a) share 1 + e^−a) and no staging buffers.
// Pointers: SI a, BX b, R10 g, DI da (or y), R9 db; CX count.

// SWIGLUB8: a in ya, b in yb, g in yg (float32, kept); writes da to
// (DI)(off) and db to (R9)(off) through the store macro st.
#define SWIGLUB8(za, z1, z2, z3, z4, z5, xr, gr, ya, yb, yg, ys, ys2) \
	VMULPS yb, yg, ys; \
	VCVTPS2PD ya, xr; \
	VCVTPS2PD ys, gr; \
	VPXORQ.BCST e8SignMask<>(SB), xr, za; \
	EXP8(za, z1, z2, z3, z4, z5); \
	VADDPD Z17, za, za; \
	VDIVPD za, xr, z1; \
	VDIVPD za, Z17, za; \
	VCVTPD2PS z1, ys; \
	VMULPS ys, yg, ys2; \
	VSUBPD za, Z17, z2; \
	VFMADD213PD Z17, xr, z2; \
	VMULPD za, gr, za; \
	VMULPD z2, za, za

// func swigluBackward32AVX512(da, db, a, b, gr *float32, n int)
TEXT ·swigluBackward32AVX512(SB), NOSPLIT, $0-48
	MOVQ da+0(FP), DI
	MOVQ db+8(FP), R9
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), BX
	MOVQ gr+32(FP), R10
	MOVQ n+40(FP), CX
	E8SETUP

swb16:
	CMPQ CX, $16
	JLT swbtail
	VMOVUPS (SI), Y22
	VMOVUPS (BX), Y23
	VMOVUPS (R10), Y24
	VMOVUPS 32(SI), Y25
	VMOVUPS 32(BX), Y26
	VMOVUPS 32(R10), Y27
	SWIGLUB8(Z0, Z1, Z2, Z3, Z4, Z5, Z18, Z20, Y22, Y23, Y24, Y28, Y29)
	SWIGLUB8(Z6, Z7, Z8, Z9, Z10, Z11, Z19, Z21, Y25, Y26, Y27, Y30, Y31)
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, (DI)
	VMOVUPS Y29, (R9)
	VCVTPD2PS Z6, Y6
	VMOVUPS Y6, 32(DI)
	VMOVUPS Y31, 32(R9)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, R10
	ADDQ $64, DI
	ADDQ $64, R9
	SUBQ $16, CX
	JMP swb16

swbtail:
	TESTQ CX, CX
	JZ swbdone
	TAILMASK8
	VMOVUPS.Z (SI), K1, Y22
	VMOVUPS.Z (BX), K1, Y23
	VMOVUPS.Z (R10), K1, Y24
	SWIGLUB8(Z0, Z1, Z2, Z3, Z4, Z5, Z18, Z20, Y22, Y23, Y24, Y28, Y29)
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, K1, (DI)
	VMOVUPS Y29, K1, (R9)
	LEAQ (SI)(AX*4), SI
	LEAQ (BX)(AX*4), BX
	LEAQ (R10)(AX*4), R10
	LEAQ (DI)(AX*4), DI
	LEAQ (R9)(AX*4), R9
	SUBQ AX, CX
	JMP swbtail

swbdone:
	VZEROUPPER
	RET

// SWIGLUF8: y = float32(silu(a))·b, a in ya, b in yb; result in ys.
#define SWIGLUF8(za, z1, z2, z3, z4, z5, xr, ya, yb, ys) \
	VCVTPS2PD ya, xr; \
	VPXORQ.BCST e8SignMask<>(SB), xr, za; \
	EXP8(za, z1, z2, z3, z4, z5); \
	VADDPD Z17, za, za; \
	VDIVPD za, xr, za; \
	VCVTPD2PS za, ys; \
	VMULPS yb, ys, ys

// func swiglu32AVX512(y, a, b *float32, n int)
TEXT ·swiglu32AVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), BX
	MOVQ n+24(FP), CX
	E8SETUP

swf16:
	CMPQ CX, $16
	JLT swftail
	VMOVUPS (SI), Y22
	VMOVUPS (BX), Y23
	VMOVUPS 32(SI), Y25
	VMOVUPS 32(BX), Y26
	SWIGLUF8(Z0, Z1, Z2, Z3, Z4, Z5, Z18, Y22, Y23, Y28)
	SWIGLUF8(Z6, Z7, Z8, Z9, Z10, Z11, Z19, Y25, Y26, Y29)
	VMOVUPS Y28, (DI)
	VMOVUPS Y29, 32(DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JMP swf16

swftail:
	TESTQ CX, CX
	JZ swfdone
	TAILMASK8
	VMOVUPS.Z (SI), K1, Y22
	VMOVUPS.Z (BX), K1, Y23
	SWIGLUF8(Z0, Z1, Z2, Z3, Z4, Z5, Z18, Y22, Y23, Y28)
	VMOVUPS Y28, K1, (DI)
	LEAQ (SI)(AX*4), SI
	LEAQ (BX)(AX*4), BX
	LEAQ (DI)(AX*4), DI
	SUBQ AX, CX
	JMP swftail

swfdone:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Constants (broadcast from 8 bytes).

#define CONST8(name, bits) \
	DATA name+0(SB)/8, $bits; \
	GLOBL name(SB), RODATA|NOPTR, $8

CONST8(e8Hi<>, 0x4086300000000000)      // 710
CONST8(e8Lo<>, 0xc087500000000000)      // −746
CONST8(e8Shifter<>, 0x4338000000000000) // 1.5·2^52
CONST8(e8Log2E<>, 0x40271547652b82fe)   // 8/ln2
CONST8(e8Ln2Hi<>, 0x3fb62e42fefa39ef)   // ln2/8 rounded to float64
CONST8(e8Ln2Lo<>, 0x3c4abc9e3b39803f)   // ln2/8 − e8Ln2Hi
CONST8(e8Eighth<>, 0x3fc0000000000000)
CONST8(e8One<>, 0x3ff0000000000000)
CONST8(e8Two<>, 0x4000000000000000)
CONST8(e8C2<>, 0x3fe0000000000000)      // 1/2!
CONST8(e8C3<>, 0x3fc5555555555555)
CONST8(e8C4<>, 0x3fa5555555555555)
CONST8(e8C5<>, 0x3f81111111111111)
CONST8(e8C6<>, 0x3f56c16c16c16c17)
CONST8(e8C7<>, 0x3f2a01a01a01a01a)
CONST8(e8C8<>, 0x3efa01a01a01a01a)      // 1/8!
CONST8(e8AbsMask<>, 0x7fffffffffffffff)
CONST8(e8SignMask<>, 0x8000000000000000)
CONST8(e8TanhCut<>, 0x3fa0000000000000) // 1/32
CONST8(e8T3<>, 0x3fd5555555555555)      // 1/3
CONST8(e8T5<>, 0x3fc1111111111111)      // 2/15
CONST8(e8T7<>, 0x3faba1ba1ba1ba1c)      // 17/315
CONST8(e8GeluA<>, 0xbfb2444f2a4d8b4b)   // −2·√(2/π)·0.044715
CONST8(e8GeluB<>, 0xbff9884533d43651)   // −2·√(2/π)
CONST8(e8Gelu2K<>, 0x3ff9884533d43651)  // 2·√(2/π)
CONST8(e8Gelu3C<>, 0x3fc12ba9d1f60179)  // 3·0.044715

// e8Tab[j] = 2^(j/8).
DATA e8Tab<>+0(SB)/8, $0x3ff0000000000000
DATA e8Tab<>+8(SB)/8, $0x3ff172b83c7d517b
DATA e8Tab<>+16(SB)/8, $0x3ff306fe0a31b715
DATA e8Tab<>+24(SB)/8, $0x3ff4bfdad5362a27
DATA e8Tab<>+32(SB)/8, $0x3ff6a09e667f3bcd
DATA e8Tab<>+40(SB)/8, $0x3ff8ace5422aa0db
DATA e8Tab<>+48(SB)/8, $0x3ffae89f995ad3ad
DATA e8Tab<>+56(SB)/8, $0x3ffd5818dcfba487
GLOBL e8Tab<>(SB), RODATA|NOPTR, $64

// e8Masks[m] = 2^m − 1, the K1 mask of m lanes.
DATA e8Masks<>+0(SB)/8, $0x7f3f1f0f07030100
DATA e8Masks<>+8(SB)/1, $0xff
GLOBL e8Masks<>(SB), RODATA|NOPTR, $9
