package notebook

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/train"
)

// With notebook.Tripwire(true), Train stops at the step whose forward
// makes a NaN, applies nothing of it, and the dashboard's error names the
// tripwire and the parameter.
func TestTripwireStopsTrain(t *testing.T) {
	s := testSession(t, t.TempDir())
	p := s.Model().Params()[1]
	v := p.Tensor.Float32s()
	v[0] = float32(math.NaN())
	forge.NoGrad(func() { p.Tensor.CopyFrom(forge.FromSlice(v, p.Tensor.Shape()...)) })
	var said bytes.Buffer
	tripwireTo(&said, true)
	defer forge.SetTripwire(false)
	if !forge.TripwireOn() || !strings.HasPrefix(said.String(), "tripwire on: ") {
		t.Fatalf("Tripwire(true) said %q, on=%v", said.String(), forge.TripwireOn())
	}
	before := s.Trainer().StepCount()
	var done int
	var err error
	msgs := capture(t, func() { done, err = trainCtx(context.Background(), s, 3) })
	var te *train.TripwireError
	if !errors.As(err, &te) || done != 0 || s.Trainer().StepCount() != before {
		t.Fatalf("Train = %d, %v (step %d → %d); want the tripwire at the first step", done, err, before, s.Trainer().StepCount())
	}
	final := htmlOf(t, msgs[len(msgs)-1])
	for _, want := range []string{`data-state="error"`, "tripwire", p.Name} {
		if !strings.Contains(final, want) {
			t.Errorf("the final dashboard lacks %q: %.600s", want, final)
		}
	}
	said.Reset()
	tripwireTo(&said, false)
	if forge.TripwireOn() || said.String() != "tripwire off\n" {
		t.Errorf("Tripwire(false) said %q, on=%v", said.String(), forge.TripwireOn())
	}
}
