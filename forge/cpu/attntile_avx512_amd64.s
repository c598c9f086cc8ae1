//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512 tile kernel of attntile.go: C (rows × n) = alpha·A·B, or
// alpha·A·B + C, with A read by broadcasts at any pair of strides and B
// row-major, and nothing packed. Rows are 8 (attnTile8) or 1 (attnTile1);
// the columns go 32 at a time, the last block masked. Only AVX512F.
//
// Registers: Z0, Z1 one k step's B row (32 columns, zero past n); Z2..Z9
// the broadcast A values of rows 0..7; Z16..Z31 the C block, row i in
// Z(16+2i) and Z(17+2i); Z10 alpha; K1, K2 the column masks of the block.
// Each C element is one chain of FMAs over k in order, from zero, then
// alpha·sum, or alpha·sum + C as one FMA: the arithmetic of attnTileGo,
// the same whatever the row or column of the block.
//
// Arguments (both functions): c, ldc (bytes), a, sai (bytes between
// rows of A), sap (bytes between k steps of A), b, ldb (bytes), n ≥ 1,
// k ≥ 1, alpha, accum.
//
// A is addressed from three pointers: SI (row 0), R12 (row 3), R13 (row
// 6), with R10 = sai: rows 1, 2 at SI+R10, SI+2·R10, and so on.

// BROW(addr, z, c0, c1): one row of one k step.
#define BROW(addr, z, c0, c1) \
	VBROADCASTSS addr, z; \
	VFMADD231PS Z0, z, c0; \
	VFMADD231PS Z1, z, c1

// OUTROW(cr, c0, c1): finish one row of the block at cr (masked).
#define OUTROW(cr, c0, c1) \
	CMPB accum+76(FP), $0; \
	JEQ 4(PC); \
	VMOVUPS.Z (cr), K1, Z11; \
	VMOVUPS.Z 64(cr), K2, Z12; \
	JMP 3(PC); \
	VXORPS Z11, Z11, Z11; \
	VXORPS Z12, Z12, Z12; \
	VFMADD231PS c0, Z10, Z11; \
	VFMADD231PS c1, Z10, Z12; \
	VMOVUPS Z11, K1, (cr); \
	VMOVUPS Z12, K2, 64(cr)

// MASKS: K1, K2 from the columns left in BX (min 32).
#define MASKS \
	MOVQ BX, DX; \
	CMPQ DX, $32; \
	JLT 2(PC); \
	MOVQ $32, DX; \
	MOVQ $1, R11; \
	MOVQ DX, CX; \
	SHLQ CX, R11; \
	DECQ R11; \
	KMOVW R11, K1; \
	SHRQ $16, R11; \
	KMOVW R11, K2

// func attnTile8(c *float32, ldc int, a *float32, sai, sap int, b *float32, ldb int, n, k int, alpha float32, accum bool)
TEXT ·attnTile8(SB), NOSPLIT, $0-77
	MOVQ n+56(FP), BX
	VBROADCASTSS alpha+72(FP), Z10
	XORQ R9, R9 // byte offset of the column block

col8:
	MASKS
	MOVQ a+16(FP), SI
	MOVQ sai+24(FP), R10
	LEAQ (SI)(R10*2), R12
	ADDQ R10, R12
	LEAQ (R12)(R10*2), R13
	ADDQ R10, R13
	MOVQ sap+32(FP), R14
	MOVQ b+40(FP), DI
	ADDQ R9, DI
	MOVQ ldb+48(FP), R8
	MOVQ k+64(FP), AX
	VXORPS Z16, Z16, Z16
	VXORPS Z17, Z17, Z17
	VXORPS Z18, Z18, Z18
	VXORPS Z19, Z19, Z19
	VXORPS Z20, Z20, Z20
	VXORPS Z21, Z21, Z21
	VXORPS Z22, Z22, Z22
	VXORPS Z23, Z23, Z23
	VXORPS Z24, Z24, Z24
	VXORPS Z25, Z25, Z25
	VXORPS Z26, Z26, Z26
	VXORPS Z27, Z27, Z27
	VXORPS Z28, Z28, Z28
	VXORPS Z29, Z29, Z29
	VXORPS Z30, Z30, Z30
	VXORPS Z31, Z31, Z31

k8:
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z 64(DI), K2, Z1
	BROW((SI), Z2, Z16, Z17)
	BROW((SI)(R10*1), Z3, Z18, Z19)
	BROW((SI)(R10*2), Z4, Z20, Z21)
	BROW((R12), Z5, Z22, Z23)
	BROW((R12)(R10*1), Z6, Z24, Z25)
	BROW((R12)(R10*2), Z7, Z26, Z27)
	BROW((R13), Z8, Z28, Z29)
	BROW((R13)(R10*1), Z9, Z30, Z31)
	ADDQ R14, SI
	ADDQ R14, R12
	ADDQ R14, R13
	ADDQ R8, DI
	DECQ AX
	JNZ k8

	MOVQ c+0(FP), DI
	ADDQ R9, DI
	OUTROW(DI, Z16, Z17)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z18, Z19)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z20, Z21)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z22, Z23)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z24, Z25)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z26, Z27)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z28, Z29)
	ADDQ ldc+8(FP), DI
	OUTROW(DI, Z30, Z31)

	ADDQ $128, R9
	SUBQ $32, BX
	JGT col8
	VZEROUPPER
	RET

// func attnTile1(c *float32, ldc int, a *float32, sai, sap int, b *float32, ldb int, n, k int, alpha float32, accum bool)
TEXT ·attnTile1(SB), NOSPLIT, $0-77
	MOVQ n+56(FP), BX
	VBROADCASTSS alpha+72(FP), Z10
	XORQ R9, R9

col1:
	MASKS
	MOVQ a+16(FP), SI
	MOVQ sap+32(FP), R14
	MOVQ b+40(FP), DI
	ADDQ R9, DI
	MOVQ ldb+48(FP), R8
	MOVQ k+64(FP), AX
	VXORPS Z16, Z16, Z16
	VXORPS Z17, Z17, Z17

k1:
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z 64(DI), K2, Z1
	BROW((SI), Z2, Z16, Z17)
	ADDQ R14, SI
	ADDQ R8, DI
	DECQ AX
	JNZ k1

	MOVQ c+0(FP), DI
	ADDQ R9, DI
	OUTROW(DI, Z16, Z17)

	ADDQ $128, R9
	SUBQ $32, BX
	JGT col1
	VZEROUPPER
	RET
