package forgetest

// Kernels a backend declares missing.
//
// A backend that is still being built may implement only part of
// backend.Backend, embedding backend.Unimplemented for the rest. It lists
// those kernels explicitly (PendingKernels). A check that reaches one of
// them cannot run: it is reported by name in the test log (a SKIP line
// naming the kernel) and counted in its part's summary. A check that
// reaches a missing kernel the backend did not declare, or that fails for
// any other reason, still fails. Backends that declare nothing (the CPU)
// are unaffected: every missing kernel is a failure there.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// PendingKernels is implemented by backends that declare kernels they do
// not implement yet: the names are backend.ErrNotImplemented.Kernel values
// ("LayerNorm", "AdamW", …).
type PendingKernels interface {
	PendingKernels() []string
}

// notImplemented returns the backend.ErrNotImplemented carried by a
// recovered panic value or an error (forge.Try wraps it), if any.
func notImplemented(r any) (backend.ErrNotImplemented, bool) {
	var nie backend.ErrNotImplemented
	switch v := r.(type) {
	case backend.ErrNotImplemented:
		return v, true
	case error:
		if errors.As(v, &nie) {
			return nie, true
		}
	}
	return nie, false
}

// pendingLog records the checks of one suite part that reached kernels
// the device's backend declares missing.
type pendingLog struct {
	dev      *forge.Device
	declared map[string]bool

	mu     sync.Mutex
	counts map[string]int // kernel → checks that reached it
	checks int
}

func newPendingLog(dev *forge.Device) *pendingLog {
	p := &pendingLog{dev: dev, declared: map[string]bool{}, counts: map[string]int{}}
	if pk, ok := backendOf(dev).(PendingKernels); ok {
		for _, k := range pk.PendingKernels() {
			p.declared[k] = true
		}
	}
	return p
}

// declaredMissing reports whether r (a recovered panic value or an error)
// is a missing kernel the backend declared, counting the check if so.
func (p *pendingLog) declaredMissing(r any) (kernel string, ok bool) {
	nie, isNIE := notImplemented(r)
	if !isNIE || !p.declared[nie.Kernel] || nie.Backend != backendOf(p.dev).Name() {
		return "", false
	}
	p.mu.Lock()
	p.counts[nie.Kernel]++
	p.checks++
	p.mu.Unlock()
	return nie.Kernel, true
}

// skip ends the check t, which reached the declared-missing kernel,
// naming it in the log.
func (p *pendingLog) skip(t testing.TB, kernel, where string) {
	t.Helper()
	t.Skipf("not run: reached kernel %s, which backend %s declares missing (PendingKernels)%s",
		kernel, backendOf(p.dev).Name(), where)
}

// run runs check as the subtest name of t; a check that reaches a kernel
// the backend declares missing is skipped, naming it, and counted.
func (p *pendingLog) run(t *testing.T, name string, check func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		defer func() {
			if r := recover(); r != nil {
				if k, ok := p.declaredMissing(r); ok {
					p.skip(t, k, "")
				}
				panic(r)
			}
		}()
		check(t)
	})
}

// report logs how many checks of part reached declared-missing kernels,
// by kernel.
func (p *pendingLog) report(t testing.TB, part string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.checks == 0 {
		if len(p.declared) > 0 {
			t.Logf("%s on %s: no check reached a kernel the backend declares missing", part, p.dev.Name())
		}
		return
	}
	names := make([]string, 0, len(p.counts))
	for k := range p.counts {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s ×%d", k, p.counts[k])
	}
	t.Logf("%s on %s: %d checks not run, each reached a kernel the backend declares missing: %s",
		part, p.dev.Name(), p.checks, strings.Join(parts, ", "))
}
