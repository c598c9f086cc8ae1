package metal

import (
	"math"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// fillOnly is a fake-driver backend whose Fill is a toy kernel, so that
// forge's own dispatch point can be exercised.
type fillOnly struct{ *Backend }

func (f fillOnly) Fill(dst backend.View, v float64) {
	f.fillU32(dst.Buf, dst.Numel(), math.Float32bits(float32(v)))
}

var fakeForgeDriver = newFakeDriver()

func init() {
	fakeForgeDriver.name = "metal-fake"
	fakeForgeDriver.perKernel = 7 * time.Millisecond
	backend.Register("metal-fake", func() (backend.Backend, error) { return fillOnly{New(fakeForgeDriver)}, nil })
}

// TestObserverGetsGPUTime checks forge's dispatch point: with an observer
// installed, a KernelTimer backend's kernels are reported with their device
// time (the fake charges 7 ms a kernel; the host takes microseconds).
func TestObserverGetsGPUTime(t *testing.T) {
	dev, err := forge.OpenDevice("metal-fake")
	if err != nil {
		t.Fatal(err)
	}
	useDevice(t, dev)

	a := forge.Full(1, 4, 4) // queued, unobserved
	var calls []forge.KernelCall
	old := forge.SetObserver(forge.Observer{Kernel: func(c forge.KernelCall) { calls = append(calls, c) }})
	x := forge.Full(2, 4, 4)
	forge.SetObserver(old)
	y := forge.Full(3, 4, 4) // batched again

	if len(calls) != 1 || calls[0].Kernel != "fill" || calls[0].Device != "metal-fake" {
		t.Fatalf("observed %+v", calls)
	}
	if calls[0].Duration != 7*time.Millisecond {
		t.Fatalf("fill took %v, want the device time 7ms", calls[0].Duration)
	}
	c, w, _ := fakeForgeDriver.counts()
	if c != 2 || w != 2 {
		t.Fatalf("%v; want the earlier fill committed before the timed one, the timed one alone", fakeForgeDriver)
	}
	for _, tc := range []struct {
		t    *forge.Tensor
		want float32
	}{{a, 1}, {x, 2}, {y, 3}} {
		if got := tc.t.Float32s(); got[0] != tc.want || got[15] != tc.want {
			t.Fatalf("values %v, want %v", got, tc.want)
		}
	}
	if c, _, _ := fakeForgeDriver.counts(); c != 3 {
		t.Fatalf("%v; want the last fill batched into one more command buffer", fakeForgeDriver)
	}
}
