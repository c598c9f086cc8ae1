package forge

import (
	bin "encoding/binary"
	"syscall"
)

// physicalMemory is hw.memsize, the machine's memory in bytes.
func physicalMemory() (int64, bool) {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil {
		return 0, false
	}
	b := []byte(s)
	if len(b) < 8 { // Sysctl drops a trailing zero byte
		b = append(b, make([]byte, 8-len(b))...)
	}
	n := int64(bin.LittleEndian.Uint64(b[:8]))
	return n, n > 0
}
