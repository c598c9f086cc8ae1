//go:build amd64 && !purego

package cpu

// attnTile8 and attnTile1 are the AVX-512 tile kernels of attntile.go (8
// rows and 1 row of C; attntile_avx512_amd64.s). ldc, sai, sap and ldb are
// in bytes; n, k ≥ 1.
//
//go:noescape
func attnTile8(c *float32, ldc int, a *float32, sai, sap int, b *float32, ldb int, n, k int, alpha float32, accum bool)

//go:noescape
func attnTile1(c *float32, ldc int, a *float32, sai, sap int, b *float32, ldb int, n, k int, alpha float32, accum bool)
