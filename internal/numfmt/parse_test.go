package numfmt

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "64MB": 64e6, "64 MiB": 64 << 20, "2G": 2 << 30, "1.5KB": 1500, "8KiB": 8192, "10B": 10, "1TB": 1e12,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "0", "-1MB", "NaN", "Inf", "1e30TB", "MB"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}
