//go:build !unix

package forge_test

import "time"

// cpuTime is not measured on this OS.
func cpuTime() time.Duration { return 0 }
