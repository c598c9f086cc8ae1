//go:build race

package cpu

// raceEnabled: the race detector makes sync.Pool drop objects at random,
// so allocation counts are meaningless.
const raceEnabled = true
