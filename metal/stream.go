package metal

// The command stream.
//
// Every command buffer gets a serial number when it is started; serials
// increase by one per command buffer. stream.done is the serial up to which
// every command buffer has completed, so a block whose last use (block.use)
// is ≤ done is idle, and one with use > done is used by the current
// (encoding) command buffer or an in-flight one.
//
// Normal mode: run encodes into the current command buffer, started lazily;
// Sync (and Read/Write of a busy buffer, and memory pressure) commits it and
// waits. Profile mode (TimeKernels): each run has a command buffer of its
// own, committed and waited for at once, and its GPU time is added up.

import (
	"fmt"
	"strings"
	"time"

	"github.com/forgeml/forge/metal/driver"
)

type stream struct {
	cur    driver.CommandBuffer // the command buffer being encoded; nil if none
	serial uint64               // the serial of cur, or of the next one started
	done   uint64               // every command buffer ≤ done has completed
	labels []string             // labels of the dispatches encoded in cur

	inflight []submitted // committed, not yet known to be complete, in order

	region region      // the concurrent region (concurrent.go)
	rst    RegionStats // its counts

	profile bool          // one command buffer per kernel, waited for
	gpuTime time.Duration // profile mode: device time of the kernels run

	st StreamStats
}

// submitted is a committed command buffer.
type submitted struct {
	cb     driver.CommandBuffer
	serial uint64
	labels []string
}

// StreamStats counts the stream's work.
type StreamStats struct {
	Dispatches     int64         // kernels encoded
	CommandBuffers int64         // command buffers committed
	Waits          int64         // Wait calls on command buffers
	Syncs          int64         // Sync calls that had work to wait for
	GPUTime        time.Duration // device time of every completed command buffer
}

func (s *stream) init() { s.serial = 1 }

// open is the serial of the command buffer being encoded, 0 if none.
func (s *stream) open() uint64 {
	if s.cur == nil {
		return 0
	}
	return s.serial
}

// run encodes one dispatch of the pipeline named by key: groups
// threadgroups of threads threads, with args bound at [[buffer(0)]],
// [[buffer(1)]], … in order (buffer bindings from arg, constant blocks
// from bytesArg). label names the launch in errors and profiles. The
// pipeline comes from the cache; a pipeline that fails to compile panics
// with the compiler's message naming the kernel. In profile mode the
// dispatch runs at once in a command buffer of its own.
func (b *Backend) run(label string, key driver.PipelineKey, groups, threads [3]int, args ...kernelArg) {
	b.runPipe(label, key, b.pipelineFor(key), groups, threads, args...)
}

// runPipe is run with key's pipeline already looked up (by a launcher that
// sized the grid from it: one cache lookup per dispatch).
func (b *Backend) runPipe(label string, key driver.PipelineKey, pipe driver.Pipeline, groups, threads [3]int, args ...kernelArg) {
	d, ok := checkDispatch(label, key, pipe, groups, threads, args)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.encodeLocked(d)
}

// dispatch is one checked kernel launch.
type dispatch struct {
	label           string
	kernel          string
	pipe            driver.Pipeline
	groups, threads [3]int
	args            []kernelArg
	dargs           []driver.Arg
}

// checkDispatch validates a launch; ok is false for an empty grid.
func checkDispatch(label string, key driver.PipelineKey, pipe driver.Pipeline, groups, threads [3]int, args []kernelArg) (d dispatch, ok bool) {
	for i, n := range groups {
		if n <= 0 || threads[i] <= 0 {
			if n == 0 {
				return d, false // an empty grid: nothing to run
			}
			panic(fmt.Sprintf("metal: %s: bad grid %v × threadgroup %v", label, groups, threads))
		}
	}
	if t := threads[0] * threads[1] * threads[2]; t > pipe.MaxThreads() {
		panic(fmt.Sprintf("metal: %s: threadgroup %v has %d threads, more than %s's maximum %d",
			label, threads, t, key.Kernel, pipe.MaxThreads()))
	}
	dargs := make([]driver.Arg, len(args))
	for i, a := range args {
		if a.drv.Buf == nil && a.drv.Bytes == nil {
			panic(fmt.Sprintf("metal: %s: argument %d is neither a buffer nor bytes", label, i))
		}
		dargs[i] = a.drv
	}
	if label == "" {
		label = key.String()
	}
	return dispatch{label, key.Kernel, pipe, groups, threads, args, dargs}, true
}

// encodeLocked encodes d into the current command buffer (started if
// there is none).
func (b *Backend) encodeLocked(d dispatch) {
	s := &b.stream
	if s.profile && s.cur != nil {
		b.syncLocked() // work queued outside a timed launch is not timed
	}
	if s.cur == nil {
		s.cur = b.drv.NewCommandBuffer()
		s.labels = s.labels[:0]
	}
	// The buffers are used by this command buffer: stamped here, in the
	// critical section that encodes, so that no commit can come between.
	for _, a := range d.args {
		if a.blk != nil {
			a.blk.use = s.serial
			a.blk.bound = true
		}
	}
	b.enterRegionLocked(d.kernel, d.args)
	s.cur.Encode(driver.Dispatch{Pipeline: d.pipe, Args: d.dargs, Groups: d.groups, Threads: d.threads, Label: d.label})
	s.labels = append(s.labels, d.label)
	s.st.Dispatches++
	if s.profile {
		cb := b.commitLocked()
		b.waitLocked(cb)
		s.gpuTime += cb.cb.GPUTime()
	}
}

// commitLocked commits the current command buffer (which must exist),
// after the dispatches a concurrent region deferred, and returns it as
// submitted.
func (b *Backend) commitLocked() submitted {
	b.flushDeferredLocked()
	s := &b.stream
	sub := submitted{cb: s.cur, serial: s.serial, labels: s.labels}
	s.cur.Commit() // which ends an open concurrent region
	s.resetRegion()
	s.inflight = append(s.inflight, sub)
	s.cur = nil
	s.labels = nil
	s.serial++
	s.st.CommandBuffers++
	return sub
}

// waitLocked waits for every in-flight command buffer up to and including
// upto, in order, recycling the memory they held. A command buffer that
// failed panics with its error and kernel labels, after the stream's state
// is consistent again.
func (b *Backend) waitLocked(upto submitted) {
	s := &b.stream
	var failed error
	n := 0
	for _, sub := range s.inflight {
		if sub.serial > upto.serial {
			break
		}
		err := sub.cb.Wait()
		s.st.Waits++
		s.st.GPUTime += sub.cb.GPUTime()
		s.done = sub.serial
		n++
		if err != nil && failed == nil {
			failed = cbError(sub, err)
		}
	}
	clear(s.inflight[:n])
	s.inflight = s.inflight[n:]
	b.pool.completed(s.done)
	if failed != nil {
		panic(failed)
	}
}

// syncLocked commits the current command buffer, if any, and waits for
// every in-flight one; then it saves the pipeline cache if it gained
// pipelines (a host read ends each training step, so a process that
// stops between steps has saved what it compiled).
func (b *Backend) syncLocked() {
	s := &b.stream
	if s.cur != nil {
		b.commitLocked()
	}
	if len(s.inflight) > 0 {
		s.st.Syncs++
		b.waitLocked(s.inflight[len(s.inflight)-1])
	}
	b.saveArchiveLocked()
}

// flushLocked commits the current command buffer without waiting for it.
func (b *Backend) flushLocked() {
	if b.stream.cur != nil {
		b.commitLocked()
	}
}

// pollLocked notes the in-flight command buffers that completed, without
// blocking.
func (b *Backend) pollLocked() {
	s := &b.stream
	n := 0
	for n < len(s.inflight) && s.inflight[n].cb.Done() {
		n++
	}
	if n > 0 {
		b.waitLocked(s.inflight[n-1]) // they are done: Wait returns at once
	}
}

// cbError describes a failed command buffer.
func cbError(sub submitted, err error) error {
	msg := err.Error()
	var kernels string
	switch len(sub.labels) {
	case 0:
		kernels = "no kernels"
	case 1:
		kernels = "kernel " + sub.labels[0]
	default:
		// The driver names the failing kernel where it knows it; otherwise
		// list the command buffer's kernels (profile mode isolates them).
		seen := map[string]bool{}
		var uniq []string
		for _, l := range sub.labels {
			if !seen[l] {
				seen[l] = true
				uniq = append(uniq, l)
			}
		}
		if len(uniq) > 12 {
			uniq = append(uniq[:12], "…")
		}
		kernels = fmt.Sprintf("%d kernels (%s)", len(sub.labels), strings.Join(uniq, ", "))
	}
	return fmt.Errorf("metal: command buffer with %s failed: %s", kernels, msg)
}

// TimeKernels runs launch — one kernel call of the forge package, which
// may encode several dispatches — in profile mode: the work queued before
// is finished first (and not counted), then each dispatch runs in a
// command buffer of its own and is waited for. It returns the device time
// (GPUStartTime to GPUEndTime) of the dispatches launch made, summed; ok is
// true (a launch that dispatched nothing took no device time).
// It is Backend.TimeKernels.
func (b *Backend) TimeKernels(launch func()) (d time.Duration, ok bool) {
	s := &b.stream
	b.Sync()
	b.mu.Lock()
	prev := s.profile
	prevTime := s.gpuTime
	s.profile = true
	s.gpuTime = 0
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		d = s.gpuTime
		s.profile = prev
		s.gpuTime = prevTime + d
		b.mu.Unlock()
	}()
	launch()
	return 0, true // d is set by the deferred function
}

// StreamStats returns the stream's counters.
func (b *Backend) StreamStats() StreamStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stream.st
}
