//go:build !amd64 || purego

package cpu

// rmsBackRow32 reports false: the Go loops of rmsNormBackward run.
func rmsBackRow32(dx []float32, pw []float64, dy, x, w []float32, rstd float64) bool {
	return false
}

// ropeVector is false: the RoPE tables have no vector layout.
const ropeVector = false

// ropeRow32 is never called here (ropeVector is false).
func ropeRow32(y, x []float32, cc, ss []float64) { panic("cpu: ropeRow32 without assembly") }
