package backend

import (
	"fmt"
	"sync/atomic"
	"time"
)

// CompileProgress is what a backend that compiles kernels at run time
// (Metal) reports while it does, once compiling has taken longer than
// CompileProgressAfter: Done of Total libraries compiled after Elapsed,
// and a last report with Finished set.
type CompileProgress struct {
	Device   string        // backend name, e.g. "metal"
	Done     int           // libraries compiled so far
	Total    int           // libraries to compile
	Elapsed  time.Duration // since compiling began
	Finished bool          // the last report of this compile
}

// CompileProgressAfter is how long compiling runs before it is reported:
// a compile that finishes sooner says nothing.
const CompileProgressAfter = time.Second

// String is the one-line message front ends print, e.g.
// "compiling metal kernels: 7/13 libraries, 1.4 s".
func (p CompileProgress) String() string {
	if p.Finished {
		return fmt.Sprintf("compiled %s kernels: %d libraries in %.1f s", p.Device, p.Total, p.Elapsed.Seconds())
	}
	return fmt.Sprintf("compiling %s kernels: %d/%d libraries, %.1f s", p.Device, p.Done, p.Total, p.Elapsed.Seconds())
}

var compileObserver atomic.Pointer[func(CompileProgress)]

// SetCompileObserver installs f (nil removes it) to receive every
// CompileProgress report, and returns the previous observer. f runs on
// the compiling goroutine, so it should only print or record.
func SetCompileObserver(f func(CompileProgress)) func(CompileProgress) {
	var p *func(CompileProgress)
	if f != nil {
		p = &f
	}
	old := compileObserver.Swap(p)
	if old == nil {
		return nil
	}
	return *old
}

// ReportCompile passes p to the installed observer, if any (backends call
// it).
func ReportCompile(p CompileProgress) {
	if f := compileObserver.Load(); f != nil {
		(*f)(p)
	}
}
