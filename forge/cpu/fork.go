package cpu

// fork: the backend's fork/join, on helper goroutines that stay awake for
// a moment after each job.
//
// Every parallel kernel here is a fork/join: the caller runs part 0 and
// w−1 other goroutines the rest. Started with a plain go statement, a
// part waits for the runtime to wake an idle thread on an idle core, and
// in a virtual machine that takes 100–130 µs at the median and
// milliseconds at the tail (measured on 2 KVM vCPUs of an Intel Xeon,
// the other core idle 200 µs before each start) — longer than a 256³
// product or most of a training step's kernels take. A threaded BLAS or
// OpenMP keeps its threads spinning for a while after a job for that
// reason. Here each helper goroutine, after its part, spins for up to
// forkSpin watching for the next job, then parks; a fork hands a part to
// a spinning helper at once, to a parked one through a channel (the old
// latency), and when every helper is busy (a fork inside a fork, or forks
// from several goroutines at once) to a new goroutine. Which goroutine
// runs a part never changes what the part computes, so results do not
// depend on it.
//
// A spinning helper holds a P, so it yields between looks
// (runtime.Gosched) every few microseconds: other goroutines of the
// program, and the garbage collector, run when they need to.

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// forkSpin is how long a helper watches for a new job after finishing one
// before it parks.
const forkSpin = 200 * time.Microsecond

// Helper states.
const (
	helperSpinning = iota // watching for a job
	helperBusy            // claimed by a fork: running, or about to run, a part
	helperParked          // asleep on wake
)

type forkHelper struct {
	state atomic.Int32
	job   atomic.Pointer[forkJob] // set by the fork that claimed the helper
	part  int                     // the part to run, written before job
	wake  chan struct{}
}

// forkJob is one fork: fn(part) for parts 1…w−1, and how many are still
// running.
type forkJob struct {
	fn      func(part int)
	pending atomic.Int32
}

var (
	forkOnce    sync.Once
	forkHelpers []*forkHelper
	forkSpawned atomic.Int64 // parts given to new goroutines: every helper was busy
)

// startHelpers starts GOMAXPROCS−1 helpers, parked.
func startHelpers() {
	n := runtime.GOMAXPROCS(0) - 1
	for range n {
		h := &forkHelper{wake: make(chan struct{}, 1)}
		h.state.Store(helperParked)
		forkHelpers = append(forkHelpers, h)
		go h.loop()
	}
}

func (h *forkHelper) loop() {
	<-h.wake // parked at the start
	for {
		j := h.job.Load()
		j.fn(h.part)
		h.job.Store(nil)
		h.state.Store(helperSpinning)
		j.pending.Add(-1)
		h.await()
	}
}

// await returns once a fork has claimed h and stored its job.
func (h *forkHelper) await() {
	start := time.Now()
	for i := 1; h.job.Load() == nil; i++ {
		if i%64 != 0 {
			continue
		}
		if time.Since(start) > forkSpin {
			if h.state.CompareAndSwap(helperSpinning, helperParked) {
				<-h.wake
				return
			}
			// A fork claimed h just now: its job is on the way.
			for h.job.Load() == nil {
			}
			return
		}
		runtime.Gosched()
	}
}

// fork runs fn(0) on the calling goroutine and fn(1), …, fn(w−1)
// concurrently on helpers (or new goroutines), and returns when all have
// returned.
func fork(w int, fn func(part int)) {
	if w <= 1 {
		fn(0)
		return
	}
	forkOnce.Do(startHelpers)
	j := &forkJob{fn: fn}
	j.pending.Store(int32(w - 1))
	part := 1
	for _, h := range forkHelpers {
		if part == w {
			break
		}
		switch {
		case h.state.CompareAndSwap(helperSpinning, helperBusy):
			h.part = part
			h.job.Store(j)
		case h.state.CompareAndSwap(helperParked, helperBusy):
			h.part = part
			h.job.Store(j)
			h.wake <- struct{}{}
		default:
			continue
		}
		part++
	}
	for ; part < w; part++ {
		forkSpawned.Add(1)
		go func(p int) {
			fn(p)
			j.pending.Add(-1)
		}(part)
	}
	fn(0)
	for i := 1; j.pending.Load() > 0; i++ {
		if i%64 == 0 {
			runtime.Gosched()
		}
	}
}
