package profile

import (
	"slices"
	"testing"

	"github.com/forgeml/forge/forge"
)

// TestRunRecordsChainsAndRestores: a recording sees every kernel with its
// scope, and every scope; an observer installed before it still receives
// both meanwhile, and is installed again afterwards.
func TestRunRecordsChainsAndRestores(t *testing.T) {
	var seen, seenScopes []string
	outer := forge.Observer{
		Kernel: func(k forge.KernelCall) { seen = append(seen, k.Kernel) },
		Scope:  func(s forge.ScopeSpan) { seenScopes = append(seenScopes, s.Path) },
	}
	before := forge.SetObserver(outer)
	defer forge.SetObserver(before)

	a, b := forge.Randn(4, 8), forge.Randn(8, 3)
	seen = nil
	p := Run(func() {
		TimeHost("data", func() {})
		forge.Scope("outer", func() {
			a.MatMul(b) // (4, 3)
			forge.Scope("inner", func() { a.Exp() })
		})
		a.Neg()
	})
	kernels := func() []string {
		var s []string
		for _, r := range p.Records {
			s = append(s, r.Kernel+"@"+r.Scope)
		}
		return s
	}
	if want := []string{"matmul@outer", "unary.exp@outer/inner", "unary.neg@"}; !slices.Equal(kernels(), want) {
		t.Errorf("records %v, want %v", kernels(), want)
	}
	if !slices.Equal(seen, []string{"matmul", "unary.exp", "unary.neg"}) || !slices.Equal(seenScopes, []string{"outer/inner", "outer"}) {
		t.Errorf("the previous observer saw kernels %v, scopes %v", seen, seenScopes)
	}
	mm := p.Records[0]
	if mm.FLOPs != 2*4*8*3 || mm.Device != "cpu" || mm.Phase != forge.PhaseForward || mm.Duration <= 0 || mm.Start.Before(p.Start) {
		t.Errorf("matmul record %+v", mm)
	}
	if len(p.Spans) != 1 || p.Spans[0].Name != "data" {
		t.Errorf("host spans %+v", p.Spans)
	}
	var scopes []string
	for _, s := range p.Scopes {
		scopes = append(scopes, s.Name)
	}
	if !slices.Equal(scopes, []string{"outer/inner", "outer"}) { // in order of ending
		t.Errorf("scopes %v", scopes)
	}
	if p.KernelTime() > p.Wall || p.Outside() != p.Wall-p.KernelTime() || p.Iterations != 1 {
		t.Errorf("wall %v, kernels %v, outside %v", p.Wall, p.KernelTime(), p.Outside())
	}
	// Run restored the observer it found.
	seen, seenScopes = nil, nil
	forge.Scope("after", func() { a.Neg() })
	if len(seen) != 1 || !slices.Equal(seenScopes, []string{"after"}) || len(p.Records) != 3 || len(p.Scopes) != 2 {
		t.Errorf("after Run: outer saw %v and %v, profile has %d records, %d scopes", seen, seenScopes, len(p.Records), len(p.Scopes))
	}
	forge.SetObserver(forge.Observer{})
	// Outside a recording forge.Scope and TimeHost only call fn.
	ran := 0
	forge.Scope("x", func() { TimeHost("y", func() { ran++ }) })
	if ran != 1 {
		t.Error("Scope/TimeHost did not call fn")
	}
}

// TestStopInsideScope: a scope that ends after its recording stopped does
// not change the profile Stop returned.
func TestStopInsideScope(t *testing.T) {
	r := Start()
	var p *Profile
	forge.Scope("s", func() { p = r.Stop() })
	if len(p.Scopes) != 0 {
		t.Errorf("a stopped recording gained scopes %+v", p.Scopes)
	}
}

func TestNestedRecorders(t *testing.T) {
	x := forge.Randn(16)
	outer := Start()
	x.Exp()
	inner := RunN(3, func() { x.Neg() })
	x.Exp()
	op := outer.Stop()
	if len(inner.Records) != 3 || inner.Iterations != 3 {
		t.Errorf("inner: %d records, %d iterations", len(inner.Records), inner.Iterations)
	}
	if len(op.Records) != 5 {
		t.Errorf("outer: %d records, want 5 (the inner recording's too)", len(op.Records))
	}
	if again := outer.Stop(); again != op || len(again.Records) != 5 {
		t.Error("a second Stop changed the profile")
	}
	if r := inner.Report(ReportOptions{}); r.Calls != 1 || r.Rows[0].Calls != 1 {
		t.Errorf("per-iteration calls %v", r.Calls)
	}
}

// TestRecordNamesThePathTaken: a record's Variant is the path that call
// took, asked of the backend after the call: on the CPU a lone product
// split between the workers and a small one each name their own, which
// differ where the AVX-512 Go kernel takes split products from a BLAS.
func TestRecordNamesThePathTaken(t *testing.T) {
	dev := forge.DefaultDevice()
	if dev.Variant("matmul") == "" {
		t.Skip("the backend picks no path per call")
	}
	big, small := forge.Randn(512, 512), forge.Randn(8, 8)
	var want []string
	p := Run(func() {
		for _, x := range []*forge.Tensor{big, small, big} {
			x.MatMul(x)
			want = append(want, dev.Variant("matmul"))
		}
	})
	var got []string
	for _, r := range p.Records {
		got = append(got, r.Variant)
	}
	if !slices.Equal(got, want) {
		t.Errorf("recorded variants %v, the backend said %v after each call", got, want)
	}
	if want[0] == want[1] {
		t.Logf("both products took %s here: the test cannot tell when the path is asked", want[0])
	}
}
