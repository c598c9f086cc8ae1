package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestForkRunsEveryPartOnce: every part 0…w−1 runs exactly once, part 0
// on the caller, and fork returns only after all have returned.
func TestForkRunsEveryPartOnce(t *testing.T) {
	for w := 1; w <= 9; w++ {
		for range 200 {
			var runs [9]atomic.Int32
			var done atomic.Int32
			caller := make(chan struct{}, 1)
			me := goroutineMarker()
			fork(w, func(p int) {
				runs[p].Add(1)
				if p == 0 && goroutineMarker() == me {
					caller <- struct{}{}
				}
				done.Add(1)
			})
			if got := done.Load(); got != int32(w) {
				t.Fatalf("w=%d: fork returned with %d of the parts done", w, got)
			}
			for p := range w {
				if n := runs[p].Load(); n != 1 {
					t.Fatalf("w=%d: part %d ran %d times", w, p, n)
				}
			}
			select {
			case <-caller:
			default:
				t.Fatalf("w=%d: part 0 did not run on the calling goroutine", w)
			}
		}
	}
}

// goroutineMarker is the calling goroutine's id, read from the header
// of its stack trace ("goroutine 7 [running]:").
func goroutineMarker() uintptr {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	var id uintptr
	for _, c := range buf[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uintptr(c-'0')
	}
	return id
}

// TestForkPartsRunConcurrently: two parts that each wait for the other
// complete, so they run at the same time (on one P as well: a spinning
// helper yields).
func TestForkPartsRunConcurrently(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		prev := runtime.GOMAXPROCS(procs)
		for range 100 {
			var flags [2]atomic.Bool
			finished := make(chan struct{})
			go func() {
				fork(2, func(p int) {
					flags[p].Store(true)
					for !flags[1-p].Load() {
						runtime.Gosched()
					}
				})
				close(finished)
			}()
			select {
			case <-finished:
			case <-time.After(10 * time.Second):
				t.Fatalf("GOMAXPROCS=%d: the two parts never ran together", procs)
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}

// TestForkNestedAndConcurrent: forks inside forks, from many goroutines
// at once, all complete with every part run once (parts that find every
// helper busy go to new goroutines).
func TestForkNestedAndConcurrent(t *testing.T) {
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fork(3, func(int) {
					fork(2, func(int) { total.Add(1) })
				})
			}
		}()
	}
	wg.Wait()
	if got := total.Load(); got != 8*100*3*2 {
		t.Fatalf("%d inner parts ran, want %d", got, 8*100*3*2)
	}
}

// TestForkReusesHelpers: forks one after another never start a goroutine
// while there are enough helpers: a fork's helpers are free again
// (spinning, or parked) by the time it returns.
func TestForkReusesHelpers(t *testing.T) {
	forkOnce.Do(startHelpers)
	w := len(forkHelpers) + 1
	if w < 2 {
		t.Skip("GOMAXPROCS is 1: no helpers")
	}
	before := forkSpawned.Load()
	var sum atomic.Int64
	for i := range 2000 {
		fork(w, func(p int) { sum.Add(int64(p)) })
		if i%500 == 0 {
			time.Sleep(2 * forkSpin) // let them park, then wake them
		}
	}
	if n := forkSpawned.Load() - before; n != 0 {
		t.Fatalf("%d parts went to new goroutines with %d helpers free", n, len(forkHelpers))
	}
	if want := int64(2000 * w * (w - 1) / 2); sum.Load() != want {
		t.Fatalf("parts summed to %d, want %d", sum.Load(), want)
	}
}

// BenchmarkForkLatency: an empty fork on every worker, back to back
// (helpers spinning) and after the helpers have parked.
func BenchmarkForkLatency(bb *testing.B) {
	w := runtime.GOMAXPROCS(0)
	bb.Run("hot", func(bb *testing.B) {
		for bb.Loop() {
			fork(w, func(int) {})
		}
	})
	bb.Run("parked", func(bb *testing.B) {
		for bb.Loop() {
			bb.StopTimer()
			time.Sleep(2 * forkSpin)
			bb.StartTimer()
			fork(w, func(int) {})
		}
	})
}
