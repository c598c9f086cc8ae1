package cpu

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// Softplus and its gradient (backend.KernelSoftplus). Each element is
// computed in float64 and rounded once to the dtype: y = max(x, 0) +
// log1p(e^−|x|), which neither overflows for large x nor cancels for
// very negative x; dx = g·sigmoid(x).

var _ = declare(backend.KernelSoftplus, computed)

// Softplus writes y = log(1 + eˣ).
func (b *Backend) Softplus(y, x backend.View) {
	n := y.Numel()
	if checkSame("softplus", y, x) == backend.Float32 {
		softplusRows(b, floats[float32](y)[:n], floats[float32](x)[:n])
	} else {
		softplusRows(b, floats[float64](y)[:n], floats[float64](x)[:n])
	}
}

// SoftplusBackward writes dx = g·sigmoid(x).
func (b *Backend) SoftplusBackward(dx, x, g backend.View) {
	n := dx.Numel()
	if checkSame("softplus backward", dx, x, g) == backend.Float32 {
		softplusGradRows(b, floats[float32](dx)[:n], floats[float32](x)[:n], floats[float32](g)[:n])
	} else {
		softplusGradRows(b, floats[float64](dx)[:n], floats[float64](x)[:n], floats[float64](g)[:n])
	}
}

func softplus(x float64) float64 { return max(x, 0) + math.Log1p(math.Exp(-math.Abs(x))) }

func softplusRows[E Float](b *Backend, y, x []E) {
	b.parallelFor(len(x), 2*transCost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = E(softplus(float64(x[i])))
		}
	})
}

func softplusGradRows[E Float](b *Backend, dx, x, g []E) {
	b.parallelFor(len(x), 2*transCost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dx[i] = E(float64(g[i]) / (1 + math.Exp(-float64(x[i]))))
		}
	})
}
