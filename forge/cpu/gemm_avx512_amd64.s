//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 micro-kernels for gemm.go: a 12×32 float32 tile and a 12×16
// float64 tile, both 12 rows × 2 ZMM vectors, and for edge tiles at most
// half as wide their left halves alone (12 rows × 1 vector, reading the
// same packed B sliver; the same FMAs for those columns, so the same
// bits). Only AVX512F instructions.
//
// Registers: Z0, Z1 one step's B sliver (two vectors); Z2..Z7 broadcast A
// values (row i uses Z2+i%6, so six broadcasts are in flight while the
// FMAs of the previous ones run); Z8..Z31 the C tile, row i in
// Z(8+2i) (columns 0..15 or 0..7) and Z(9+2i).
//
// Each C element is one chain of FMAs over k in order, from zero, then
// added to C when accumulating: the same arithmetic as the AVX2 kernels,
// so a product's result does not depend on where its tiles fall.
//
// A values are broadcast into registers (VBROADCASTSS/SD, a load-port
// operation) rather than through the {1to16} memory form of the FMA: each
// feeds two FMAs, so a float32 step is 14 loads for 24 FMAs instead of 26,
// which matters where two 512-bit FMAs issue a cycle (Intel). On Zen 4,
// whose 512-bit FMAs are double-pumped (one a cycle), both forms ran the
// same (112 GFLOP/s with the tile in L1).
//
// The k loop is unrolled by 4. Each iteration prefetches the A sliver
// APF bytes ahead (one line per 64 bytes consumed: a float32 step is 48
// bytes of A, a float64 step 96); past the sliver's end that is the next
// tile's sliver, which the macro-kernel multiplies next. B, which every
// tile of a column of tiles re-reads from L1, is left to the hardware
// prefetcher. The C tile's lines are prefetched before the loop, so that
// the final read-modify-write of the tile does not wait on them (+4-6 %
// at 512³ and 1024³ on Zen 4; the A prefetch distance, 0 to 1536 bytes,
// made no measurable difference there).

#define APF 768

// SROW: row i of one float32 step. The A value at ao(SI) is broadcast
// into r and multiplied by both B vectors into the row's accumulators.
#define SROW(ao, r, c0, c1) \
	VBROADCASTSS ao(SI), r; \
	VFMADD231PS Z0, r, c0; \
	VFMADD231PS Z1, r, c1

// SSTEP: one k step of the float32 kernel; A at ao(SI) (12 values), B at
// bo(DI) (32 values).
#define SSTEP(ao, bo) \
	VMOVUPS (bo)(DI), Z0; \
	VMOVUPS (bo+64)(DI), Z1; \
	SROW((ao), Z2, Z8, Z9); \
	SROW((ao+4), Z3, Z10, Z11); \
	SROW((ao+8), Z4, Z12, Z13); \
	SROW((ao+12), Z5, Z14, Z15); \
	SROW((ao+16), Z6, Z16, Z17); \
	SROW((ao+20), Z7, Z18, Z19); \
	SROW((ao+24), Z2, Z20, Z21); \
	SROW((ao+28), Z3, Z22, Z23); \
	SROW((ao+32), Z4, Z24, Z25); \
	SROW((ao+36), Z5, Z26, Z27); \
	SROW((ao+40), Z6, Z28, Z29); \
	SROW((ao+44), Z7, Z30, Z31)

// DROW and DSTEP are SROW and SSTEP for float64: A at ao(SI) (12 values,
// 96 bytes), B at bo(DI) (16 values, 128 bytes).
#define DROW(ao, r, c0, c1) \
	VBROADCASTSD ao(SI), r; \
	VFMADD231PD Z0, r, c0; \
	VFMADD231PD Z1, r, c1

#define DSTEP(ao, bo) \
	VMOVUPD (bo)(DI), Z0; \
	VMOVUPD (bo+64)(DI), Z1; \
	DROW((ao), Z2, Z8, Z9); \
	DROW((ao+8), Z3, Z10, Z11); \
	DROW((ao+16), Z4, Z12, Z13); \
	DROW((ao+24), Z5, Z14, Z15); \
	DROW((ao+32), Z6, Z16, Z17); \
	DROW((ao+40), Z7, Z18, Z19); \
	DROW((ao+48), Z2, Z20, Z21); \
	DROW((ao+56), Z3, Z22, Z23); \
	DROW((ao+64), Z4, Z24, Z25); \
	DROW((ao+72), Z5, Z26, Z27); \
	DROW((ao+80), Z6, Z28, Z29); \
	DROW((ao+88), Z7, Z30, Z31)

// ZERO24 clears the 24 accumulators.
#define ZERO24 \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; \
	VPXORD Z29, Z29, Z29; \
	VPXORD Z30, Z30, Z30; \
	VPXORD Z31, Z31, Z31

// PFROW prefetches one 128-byte row of C at (R9) (three lines when it is
// not line-aligned) and moves R9 to the next row.
#define PFROW \
	PREFETCHT0 (R9); \
	PREFETCHT0 64(R9); \
	PREFETCHT0 127(R9); \
	ADDQ R8, R9

// PFC prefetches the 12 rows of the C tile at DX (row stride R8).
#define PFC \
	MOVQ DX, R9; \
	PFROW; PFROW; PFROW; PFROW; PFROW; PFROW; \
	PFROW; PFROW; PFROW; PFROW; PFROW; PFROW

// SADDROW adds the float32 C row at (R9) to accumulators c0, c1 and moves
// R9 on; SSTROW stores them to the row at (DX) and moves DX on. DADDROW and
// DSTROW are the same for float64.
#define SADDROW(c0, c1) \
	VADDPS (R9), c0, c0; \
	VADDPS 64(R9), c1, c1; \
	ADDQ R8, R9

#define SSTROW(c0, c1) \
	VMOVUPS c0, (DX); \
	VMOVUPS c1, 64(DX); \
	ADDQ R8, DX

#define DADDROW(c0, c1) \
	VADDPD (R9), c0, c0; \
	VADDPD 64(R9), c1, c1; \
	ADDQ R8, R9

#define DSTROW(c0, c1) \
	VMOVUPD c0, (DX); \
	VMOVUPD c1, 64(DX); \
	ADDQ R8, DX

// SHROW, SHSTEP, DHROW, DHSTEP: the steps of the half-width kernels, the
// left vector of the B sliver only (Z0), row i accumulating in Z(8+i).
#define SHROW(ao, r, c0) \
	VBROADCASTSS ao(SI), r; \
	VFMADD231PS Z0, r, c0

#define SHSTEP(ao, bo) \
	VMOVUPS (bo)(DI), Z0; \
	SHROW((ao), Z2, Z8); \
	SHROW((ao+4), Z3, Z9); \
	SHROW((ao+8), Z4, Z10); \
	SHROW((ao+12), Z5, Z11); \
	SHROW((ao+16), Z6, Z12); \
	SHROW((ao+20), Z7, Z13); \
	SHROW((ao+24), Z2, Z14); \
	SHROW((ao+28), Z3, Z15); \
	SHROW((ao+32), Z4, Z16); \
	SHROW((ao+36), Z5, Z17); \
	SHROW((ao+40), Z6, Z18); \
	SHROW((ao+44), Z7, Z19)

#define DHROW(ao, r, c0) \
	VBROADCASTSD ao(SI), r; \
	VFMADD231PD Z0, r, c0

#define DHSTEP(ao, bo) \
	VMOVUPD (bo)(DI), Z0; \
	DHROW((ao), Z2, Z8); \
	DHROW((ao+8), Z3, Z9); \
	DHROW((ao+16), Z4, Z10); \
	DHROW((ao+24), Z5, Z11); \
	DHROW((ao+32), Z6, Z12); \
	DHROW((ao+40), Z7, Z13); \
	DHROW((ao+48), Z2, Z14); \
	DHROW((ao+56), Z3, Z15); \
	DHROW((ao+64), Z4, Z16); \
	DHROW((ao+72), Z5, Z17); \
	DHROW((ao+80), Z6, Z18); \
	DHROW((ao+88), Z7, Z19)

// ZERO12 clears the 12 accumulators of a half-width kernel.
#define ZERO12 \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19

// PFHROW and PFHC are PFROW and PFC for the 64-byte rows of a half tile.
#define PFHROW \
	PREFETCHT0 (R9); \
	PREFETCHT0 63(R9); \
	ADDQ R8, R9

#define PFHC \
	MOVQ DX, R9; \
	PFHROW; PFHROW; PFHROW; PFHROW; PFHROW; PFHROW; \
	PFHROW; PFHROW; PFHROW; PFHROW; PFHROW; PFHROW

// SHADD/SHST and DHADD/DHST: one row of a half tile, added from (R9) or
// stored to (DX), moving the pointer on.
#define SHADD(c0) \
	VADDPS (R9), c0, c0; \
	ADDQ R8, R9

#define SHST(c0) \
	VMOVUPS c0, (DX); \
	ADDQ R8, DX

#define DHADD(c0) \
	VADDPD (R9), c0, c0; \
	ADDQ R8, R9

#define DHST(c0) \
	VMOVUPD c0, (DX); \
	ADDQ R8, DX

// func sgemmKernel12x32(k int, a, b, c *float32, ldc int, accumulate bool)
TEXT ·sgemmKernel12x32(SB), NOSPLIT, $0-41
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	PFC
	ZERO24
	MOVQ CX, BX
	SHRQ $2, BX
	JZ s12tail
s12loop4:
	PREFETCHT0 (APF)(SI)
	SSTEP(0, 0)
	PREFETCHT0 (APF+64)(SI)
	SSTEP(48, 128)
	PREFETCHT0 (APF+128)(SI)
	SSTEP(96, 256)
	SSTEP(144, 384)
	ADDQ $192, SI
	ADDQ $512, DI
	DECQ BX
	JNZ s12loop4
s12tail:
	ANDQ $3, CX
	JZ s12epilogue
s12loop1:
	SSTEP(0, 0)
	ADDQ $48, SI
	ADDQ $128, DI
	DECQ CX
	JNZ s12loop1
s12epilogue:
	MOVBLZX accumulate+40(FP), AX
	TESTL AX, AX
	JZ s12store
	MOVQ DX, R9
	SADDROW(Z8, Z9)
	SADDROW(Z10, Z11)
	SADDROW(Z12, Z13)
	SADDROW(Z14, Z15)
	SADDROW(Z16, Z17)
	SADDROW(Z18, Z19)
	SADDROW(Z20, Z21)
	SADDROW(Z22, Z23)
	SADDROW(Z24, Z25)
	SADDROW(Z26, Z27)
	SADDROW(Z28, Z29)
	SADDROW(Z30, Z31)
s12store:
	SSTROW(Z8, Z9)
	SSTROW(Z10, Z11)
	SSTROW(Z12, Z13)
	SSTROW(Z14, Z15)
	SSTROW(Z16, Z17)
	SSTROW(Z18, Z19)
	SSTROW(Z20, Z21)
	SSTROW(Z22, Z23)
	SSTROW(Z24, Z25)
	SSTROW(Z26, Z27)
	SSTROW(Z28, Z29)
	SSTROW(Z30, Z31)
	VZEROUPPER
	RET

// func dgemmKernel12x16(k int, a, b, c *float64, ldc int, accumulate bool)
TEXT ·dgemmKernel12x16(SB), NOSPLIT, $0-41
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $3, R8
	PFC
	ZERO24
	MOVQ CX, BX
	SHRQ $2, BX
	JZ d12tail
d12loop4:
	PREFETCHT0 (APF)(SI)
	DSTEP(0, 0)
	PREFETCHT0 (APF+64)(SI)
	DSTEP(96, 128)
	PREFETCHT0 (APF+128)(SI)
	PREFETCHT0 (APF+192)(SI)
	DSTEP(192, 256)
	PREFETCHT0 (APF+256)(SI)
	PREFETCHT0 (APF+320)(SI)
	DSTEP(288, 384)
	ADDQ $384, SI
	ADDQ $512, DI
	DECQ BX
	JNZ d12loop4
d12tail:
	ANDQ $3, CX
	JZ d12epilogue
d12loop1:
	DSTEP(0, 0)
	ADDQ $96, SI
	ADDQ $128, DI
	DECQ CX
	JNZ d12loop1
d12epilogue:
	MOVBLZX accumulate+40(FP), AX
	TESTL AX, AX
	JZ d12store
	MOVQ DX, R9
	DADDROW(Z8, Z9)
	DADDROW(Z10, Z11)
	DADDROW(Z12, Z13)
	DADDROW(Z14, Z15)
	DADDROW(Z16, Z17)
	DADDROW(Z18, Z19)
	DADDROW(Z20, Z21)
	DADDROW(Z22, Z23)
	DADDROW(Z24, Z25)
	DADDROW(Z26, Z27)
	DADDROW(Z28, Z29)
	DADDROW(Z30, Z31)
d12store:
	DSTROW(Z8, Z9)
	DSTROW(Z10, Z11)
	DSTROW(Z12, Z13)
	DSTROW(Z14, Z15)
	DSTROW(Z16, Z17)
	DSTROW(Z18, Z19)
	DSTROW(Z20, Z21)
	DSTROW(Z22, Z23)
	DSTROW(Z24, Z25)
	DSTROW(Z26, Z27)
	DSTROW(Z28, Z29)
	DSTROW(Z30, Z31)
	VZEROUPPER
	RET

// func sgemmKernel12x16of32(k int, a, b, c *float32, ldc int, accumulate bool)
TEXT ·sgemmKernel12x16of32(SB), NOSPLIT, $0-41
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	PFHC
	ZERO12
	MOVQ CX, BX
	SHRQ $2, BX
	JZ s12htail
s12hloop4:
	PREFETCHT0 (APF)(SI)
	SHSTEP(0, 0)
	PREFETCHT0 (APF+64)(SI)
	SHSTEP(48, 128)
	PREFETCHT0 (APF+128)(SI)
	SHSTEP(96, 256)
	SHSTEP(144, 384)
	ADDQ $192, SI
	ADDQ $512, DI
	DECQ BX
	JNZ s12hloop4
s12htail:
	ANDQ $3, CX
	JZ s12hepilogue
s12hloop1:
	SHSTEP(0, 0)
	ADDQ $48, SI
	ADDQ $128, DI
	DECQ CX
	JNZ s12hloop1
s12hepilogue:
	MOVBLZX accumulate+40(FP), AX
	TESTL AX, AX
	JZ s12hstore
	MOVQ DX, R9
	SHADD(Z8)
	SHADD(Z9)
	SHADD(Z10)
	SHADD(Z11)
	SHADD(Z12)
	SHADD(Z13)
	SHADD(Z14)
	SHADD(Z15)
	SHADD(Z16)
	SHADD(Z17)
	SHADD(Z18)
	SHADD(Z19)
s12hstore:
	SHST(Z8)
	SHST(Z9)
	SHST(Z10)
	SHST(Z11)
	SHST(Z12)
	SHST(Z13)
	SHST(Z14)
	SHST(Z15)
	SHST(Z16)
	SHST(Z17)
	SHST(Z18)
	SHST(Z19)
	VZEROUPPER
	RET

// func dgemmKernel12x8of16(k int, a, b, c *float64, ldc int, accumulate bool)
TEXT ·dgemmKernel12x8of16(SB), NOSPLIT, $0-41
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $3, R8
	PFHC
	ZERO12
	MOVQ CX, BX
	SHRQ $2, BX
	JZ d12htail
d12hloop4:
	PREFETCHT0 (APF)(SI)
	DHSTEP(0, 0)
	PREFETCHT0 (APF+64)(SI)
	DHSTEP(96, 128)
	PREFETCHT0 (APF+128)(SI)
	PREFETCHT0 (APF+192)(SI)
	DHSTEP(192, 256)
	PREFETCHT0 (APF+256)(SI)
	PREFETCHT0 (APF+320)(SI)
	DHSTEP(288, 384)
	ADDQ $384, SI
	ADDQ $512, DI
	DECQ BX
	JNZ d12hloop4
d12htail:
	ANDQ $3, CX
	JZ d12hepilogue
d12hloop1:
	DHSTEP(0, 0)
	ADDQ $96, SI
	ADDQ $128, DI
	DECQ CX
	JNZ d12hloop1
d12hepilogue:
	MOVBLZX accumulate+40(FP), AX
	TESTL AX, AX
	JZ d12hstore
	MOVQ DX, R9
	DHADD(Z8)
	DHADD(Z9)
	DHADD(Z10)
	DHADD(Z11)
	DHADD(Z12)
	DHADD(Z13)
	DHADD(Z14)
	DHADD(Z15)
	DHADD(Z16)
	DHADD(Z17)
	DHADD(Z18)
	DHADD(Z19)
d12hstore:
	DHST(Z8)
	DHST(Z9)
	DHST(Z10)
	DHST(Z11)
	DHST(Z12)
	DHST(Z13)
	DHST(Z14)
	DHST(Z15)
	DHST(Z16)
	DHST(Z17)
	DHST(Z18)
	DHST(Z19)
	VZEROUPPER
	RET
