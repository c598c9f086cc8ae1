package data

import (
	"os"
	"testing"
)

// procMaps returns the process's memory mappings, and whether this
// platform can list them.
func procMaps(t *testing.T) (string, bool) {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return string(maps), true
}
