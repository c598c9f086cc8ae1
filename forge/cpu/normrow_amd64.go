//go:build amd64 && !purego

package cpu

//go:noescape
func dot3x32AVX2(a, b, c *float32, n int) float64

//go:noescape
func rmsBackRow32AVX2(dx, dy, x, w *float32, pw *float64, n int, rstd, k float64)

// rmsBackRow32 is the float32 row of the RMSNorm backward with a weight,
// a dx and a dw partial (rmsNormBackward): it reports false, doing
// nothing, where the assembly does not run.
func rmsBackRow32(dx []float32, pw []float64, dy, x, w []float32, rstd float64) bool {
	c := len(x)
	if !expAVX2 || c < 4 {
		return false
	}
	dy, w, dx, pw = dy[:c], w[:c], dx[:c], pw[:c]
	c4 := c &^ 3
	sgx := dot3x32AVX2(&dy[0], &w[0], &x[0], c4)
	for j := c4; j < c; j++ {
		sgx += float64(dy[j]) * float64(w[j]) * float64(x[j])
	}
	k := rstd * rstd * sgx / float64(c)
	rmsBackRow32AVX2(&dx[0], &dy[0], &x[0], &w[0], &pw[0], c4, rstd, k)
	for j := c4; j < c; j++ {
		pw[j] += float64(dy[j]) * float64(x[j]) * rstd
		dx[j] = float32(rstd * (float64(dy[j])*float64(w[j]) - float64(x[j])*k))
	}
	return true
}

//go:noescape
func ropeRow32AVX512(y, x *float32, cc, ss *float64, n int)

// ropeVector reports whether ropeRow32 runs (AVX-512): the RoPE tables
// then carry the vector layout.
var ropeVector = expAVX512

// ropeRow32 rotates one row (len a multiple of 8) with the vector tables
// of its position (ropeTable.cc, ss): ropeForward's bits.
func ropeRow32(y, x []float32, cc, ss []float64) {
	n := len(x)
	ropeRow32AVX512(&y[:n][0], &x[0], &cc[:n][0], &ss[:n][0], n)
}
