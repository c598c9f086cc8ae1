package forge

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func tripOf(t *testing.T, fn func()) *Trip {
	t.Helper()
	var e *Error
	if err := Try(fn); !errors.As(err, &e) || e.Trip == nil {
		t.Fatalf("the tripwire did not catch it: %v", err)
	}
	if strings.Contains(e.Error(), "\n") {
		t.Errorf("not one line: %q", e.Error())
	}
	return e.Trip
}

// TestTripwireLogOfNegative: the log of a negative number inside a scope
// is caught at the log, naming its scope and shapes, and the ops after it
// do not run.
func TestTripwireLogOfNegative(t *testing.T) {
	SetTripwire(true)
	defer SetTripwire(false)
	x := FromSlice([]float32{1, 2, -3, 4}, 2, 2)
	ran := false
	tr := tripOf(t, func() {
		ScopeIndexed("blocks", 2, func() {
			Scope("attn", func() {
				y := x.Exp().Log() // finite
				y = y.Log()        // log(-3): NaN
				ran = true
				_ = y.Sum()
			})
		})
	})
	if ran {
		t.Error("the ops after the bad one ran")
	}
	if tr.Kernel != "unary.log" || tr.Scope != "blocks.2.attn" || tr.Bad != 1 || tr.Of != 4 || !math.IsNaN(tr.Value) || tr.Phase != PhaseForward {
		t.Errorf("trip = %+v", tr)
	}
	msg := tr.String()
	for _, want := range []string{"NaN from unary.log", "[2 2] → [2 2]", "forward, in blocks.2.attn", "1 of 4 values not finite"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if len(tr.InputsBad) != 0 {
		t.Errorf("the log's input was finite, the trip says %v", tr.InputsBad)
	}
}

// TestTripwireNamesParameter: a parameter holding a NaN is named by the
// first op that reads it (the matmul), as already not finite.
func TestTripwireNamesParameter(t *testing.T) {
	w := FromSlice([]float32{1, float32(math.NaN()), 3, 4}, 2, 2).SetName("blocks.0.attn.wq")
	x := Ones(3, 2)
	SetTripwire(true)
	defer SetTripwire(false)
	tr := tripOf(t, func() { x.MatMul(w.T()) })
	if tr.Kernel != "matmul" || len(tr.Params) != 1 || tr.Params[0] != "blocks.0.attn.wq" || len(tr.InputsBad) != 1 || tr.InputsBad[0] != "blocks.0.attn.wq" {
		t.Errorf("trip = %+v", tr)
	}
}

// TestTripwireOffChecksNothing: off, no kernel is checked (and a NaN goes
// through), and scopes are not built; on, every kernel is.
func TestTripwireOffChecksNothing(t *testing.T) {
	x := FromSlice([]float32{-1, 2}, 2)
	before := tripChecks
	y := x.Log().Exp().Sum()
	if tripChecks != before {
		t.Errorf("off: %d checks", tripChecks-before)
	}
	if !math.IsNaN(y.Item()) {
		t.Errorf("log(-1) summed = %v", y.Item())
	}
	SetTripwire(true)
	defer SetTripwire(false)
	x.Abs().Exp()
	if tripChecks != before+2 {
		t.Errorf("on: %d checks for 2 kernels", tripChecks-before)
	}
}
