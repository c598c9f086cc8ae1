package doctor

import (
	"fmt"
	"time"

	"github.com/forgeml/forge/forge/forgetest"
)

// conformance runs forgetest.Quick on the device under test.
func (r *run) conformance() {
	r.section("Conformance (forward and gradient checks against PyTorch fixtures and the CPU)")
	start := time.Now()
	n, failed := 0, 0
	checks, err := forgetest.Quick(r.dev, func(c forgetest.Check) {
		n++
		status := "ok"
		if c.Failure != "" {
			status = "FAILED"
		}
		r.progress("conformance: %s %s %s", c.Suite, c.Name, status)
	})
	if err != nil {
		r.fail("the conformance checks could not start: %v", err)
		return
	}
	for _, c := range checks {
		fwd, grad := "-", "-"
		if c.Fwd >= 0 {
			fwd = fmt.Sprintf("%.1e", c.Fwd)
		}
		if c.Grad >= 0 {
			grad = fmt.Sprintf("%.1e", c.Grad)
		}
		if c.Failure != "" {
			failed++
			r.fail("conformance %s %s: %s", c.Suite, c.Name, c.Failure)
			continue
		}
		r.line("- ok %-5s %-32s fwd maxdiff %-8s grad maxdiff %s", c.Suite, c.Name, fwd, grad)
	}
	r.line("%d checks, %d failed, %.1f s (torch: tolerance 1e-5 of max(1,|want|) unless the fixture says; grad: float32 analytic vs float64 central differences on the cpu, 1e-5)",
		n, failed, time.Since(start).Seconds())
}
