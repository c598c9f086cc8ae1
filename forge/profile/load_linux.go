package profile

import (
	"os"
	"strconv"
	"strings"
)

// otherLoad starts watching the CPUs and returns a function that reports
// the share of all CPU time, since the start, used by other processes
// (from /proc/stat and /proc/self/stat), or -1 if unknown or too short to
// tell.
func otherLoad() func() float64 {
	busy0, total0, ok := cpuTicks()
	own0 := ownTicks()
	return func() float64 {
		busy, total, ok2 := cpuTicks()
		if !ok || !ok2 || total-total0 < minTicks {
			return -1
		}
		return max(0, (busy-busy0-(ownTicks()-own0))/(total-total0))
	}
}

// minTicks is the fewest CPU ticks (1/100 s each, summed over the CPUs)
// worth a figure: shorter intervals are too coarse to say anything.
const minTicks = 50

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
	for i, s := range f[1:min(len(f), 9)] { // guest time is already counted in user
		v, _ := strconv.ParseFloat(s, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, true
}

// ownTicks returns this process's user+system ticks.
func ownTicks() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from state (3) on
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return u + st
}
