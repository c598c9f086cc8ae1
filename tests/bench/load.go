package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// The machine's load from other processes, from /proc (Linux only; NaN
// elsewhere): the CPU time all processes used minus this process's and the
// numpy process's, as a share of the CPUs' time. Timings on a busy machine
// mean little, and the table says so.

// cpuTicks returns the busy and total ticks of all CPUs.
func cpuTicks() (busy, total float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, true
}

// procTicks returns the user+system ticks of process pid (0: this one).
func procTicks(pid int) float64 {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is field 3,
	// utime 14, stime 15.
	s := string(b)
	s = s[strings.LastIndexByte(s, ')')+2:]
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return u + st
}

type loadMonitor struct {
	ok                 bool
	pid                int
	busy0, total0, own float64
}

func startLoadMonitor(numpyPid int) *loadMonitor {
	m := &loadMonitor{pid: numpyPid}
	m.busy0, m.total0, m.ok = cpuTicks()
	m.own = procTicks(0) + m.childTicks()
	return m
}

func (m *loadMonitor) childTicks() float64 {
	if m.pid == 0 {
		return 0
	}
	return procTicks(m.pid)
}

// otherShare is the share of CPU time used by other processes since start.
func (m *loadMonitor) otherShare() float64 {
	busy, total, ok := cpuTicks()
	if !m.ok || !ok || total <= m.total0 {
		return math.NaN()
	}
	own := procTicks(0) + m.childTicks() - m.own
	return max(0, (busy-m.busy0-own)/(total-m.total0))
}

// waitIdle waits up to limit for a quarter second in which the CPUs are at
// least 95 % idle, so that a round does not start amid someone else's work.
func waitIdle(limit time.Duration) {
	if limit <= 0 {
		return
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b0, t0, ok := cpuTicks()
		if !ok {
			return
		}
		time.Sleep(250 * time.Millisecond)
		b1, t1, _ := cpuTicks()
		if t1 > t0 && (b1-b0)/(t1-t0) < 0.05 {
			return
		}
	}
}
