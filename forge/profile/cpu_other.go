//go:build !darwin

package profile

import (
	"os"
	"strings"
)

// readCPUModel reads the model name from /proc/cpuinfo (Linux).
func readCPUModel() (string, error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errNoModel
}
