package forge

import (
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// meteredBackend is the CPU backend counting the bytes of the buffers it
// handed out and that were not freed (buffers the garbage collector drops
// stay counted: the tests measure what forge frees itself).
type meteredBackend struct {
	backend.Backend
	live, peak int64
	bufs       map[backend.Buffer]int64
}

func (m *meteredBackend) Alloc(dt backend.DType, n int) backend.Buffer {
	b := m.Backend.Alloc(dt, n)
	sz := int64(n * dt.Size())
	m.bufs[b] = sz
	m.live += sz
	m.peak = max(m.peak, m.live)
	return b
}

func (m *meteredBackend) Free(b backend.Buffer) {
	sz, ok := m.bufs[b]
	if !ok {
		panic("metered: Free of a buffer not handed out, or freed twice")
	}
	delete(m.bufs, b)
	m.live -= sz
	m.Backend.Free(b)
}

func meteredDevice(t *testing.T) (*Device, *meteredBackend) {
	t.Helper()
	cpu, err := backend.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m := &meteredBackend{Backend: cpu, bufs: map[backend.Buffer]int64{}}
	return &Device{name: "cpu-metered", b: m, caps: cpu.Capabilities()}, m
}

// TestBackwardFreesAsItGoes: a chain of 24 elementwise ops on a 64 K-element
// tensor. Backward allocates a gradient per op; it must free each once the
// op before it consumed it, so that its peak stays a few tensors above
// where it started (not 24), and what is left afterwards is exactly the
// leaf's gradient. The gradient is checked against its closed form.
func TestBackwardFreesAsItGoes(t *testing.T) {
	dev, m := meteredDevice(t)
	const n, depth = 1 << 16, 24
	tensor := int64(4 * n)
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%7) / 8
	}
	x := FromSlice(vals, n).To(dev).RequiresGrad()
	h := x
	for range depth / 2 {
		h = h.MulScalar(1.5).AddScalar(0.25) // d/dx: 1.5 per pair
	}
	loss := h.Sum()
	before := m.live
	m.peak = m.live
	loss.Backward()
	if grow := m.peak - before; grow > 4*tensor {
		t.Errorf("backward's peak grew %d tensors above its start; want at most 4 (its gradients freed as consumed)", grow/tensor)
	}
	if left := m.live - before; left != tensor {
		t.Errorf("after backward %d bytes more are live, want the leaf's gradient alone (%d)", left, tensor)
	}
	want := math.Pow(1.5, depth/2)
	for i, g := range x.Grad().Float32s() {
		if math.Abs(float64(g)-want) > 1e-5*want {
			t.Fatalf("grad[%d] = %v, want %v", i, g, want)
		}
	}
}

// TestBackwardKeepsSharedGradients: rules that pass their upstream
// gradient on unchanged or as a view (Add to both inputs, a reshape, a
// transpose) make several pending gradients share one buffer; none may be
// freed while another still uses it. The gradients are checked against
// closed forms.
func TestBackwardKeepsSharedGradients(t *testing.T) {
	dev, m := meteredDevice(t)
	a := FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3).To(dev).RequiresGrad()
	b := FromSlice([]float32{1, 1, 1, 1, 1, 1}, 2, 3).To(dev).RequiresGrad()
	s := a.Add(b)                // g passed to both
	r := s.Reshape(3, 2).T()     // views of g
	q := r.Contiguous().Mul(r)   // r used twice
	loss := q.Sum().Add(s.Sum()) // s used twice
	before := m.live
	loss.Backward()
	// d/da (Σ s² + Σ s) = 2s + 1, the same for b.
	for _, leaf := range []*Tensor{a, b} {
		for i, g := range leaf.Grad().Float32s() {
			av := []float32{1, 2, 3, 4, 5, 6}[i]
			if want := 2*(av+1) + 1; g != want {
				t.Fatalf("grad[%d] = %v, want %v", i, g, want)
			}
		}
	}
	if left := m.live - before; left != 2*6*4 {
		t.Errorf("after backward %d bytes more are live, want the two leaves' gradients (48)", left)
	}
}

// TestCollect frees what fn allocated, except kept tensors and leaf
// gradients; a freed tensor, or a view of one, refuses to be used with a
// line that says why; a panicking fn frees nothing.
func TestCollect(t *testing.T) {
	dev, m := meteredDevice(t)
	w := FromSlice([]float32{1, 2, 3}, 3).To(dev).RequiresGrad()
	start := m.live
	var tmp, view, kept *Tensor
	Collect(func() {
		tmp = w.MulScalar(2)
		view = tmp.Reshape(1, 3)
		kept = tmp.Sum()
		Keep(kept)
		tmp.Mul(w).Sum().Backward()
	})
	if got := m.live - start; got != 4+3*4 {
		t.Errorf("after Collect %d bytes are live beyond the start, want the kept scalar and w's gradient (16)", got)
	}
	if got := kept.Item(); got != 12 {
		t.Errorf("kept = %v, want 12", got)
	}
	if got := w.Grad().Float32s(); got[2] != 12 {
		t.Errorf("w.Grad = %v, want 4·w", got)
	}
	for _, x := range []*Tensor{tmp, view} {
		msg := func() (msg string) {
			defer func() { msg = strings.TrimSpace(strings.Split(recoverString(recover()), "\n")[0]) }()
			x.Sum()
			return ""
		}()
		if !strings.Contains(msg, "freed at the end of the forge.Collect") || !strings.Contains(msg, "forge.Keep") {
			t.Errorf("using a freed tensor %v: %q", x.Shape(), msg)
		}
	}

	live := m.live
	func() {
		defer func() { _ = recover() }()
		Collect(func() {
			tmp = w.MulScalar(3)
			panic("boom")
		})
	}()
	if m.live != live+3*4 || tmp.Float32s()[0] != 3 {
		t.Errorf("a panicking Collect freed what it allocated")
	}
}

func recoverString(r any) string {
	switch v := r.(type) {
	case nil:
		return ""
	case error:
		return v.Error()
	case string:
		return v
	}
	return "unexpected panic value"
}

// TestReleaseGrad frees a leaf's gradient now, and a later use of the old
// gradient says what freed it.
func TestReleaseGrad(t *testing.T) {
	dev, m := meteredDevice(t)
	w := FromSlice([]float32{1, 2, 3}, 3).To(dev).RequiresGrad()
	w.Mul(w).Sum().Backward()
	g := w.Grad()
	live := m.live
	w.ReleaseGrad()
	if w.Grad() != nil || m.live != live-12 {
		t.Fatalf("after ReleaseGrad: grad %v, %d bytes freed (want 12)", w.Grad(), live-m.live)
	}
	defer func() {
		if msg := recoverString(recover()); !strings.Contains(msg, "freed by ReleaseGrad") {
			t.Errorf("using a released gradient: %q", msg)
		}
	}()
	g.Float32s()
}
