//go:build !linux

package data

import "testing"

// procMaps returns the process's memory mappings, and whether this
// platform can list them: only Linux can, through /proc.
func procMaps(t *testing.T) (string, bool) { return "", false }
