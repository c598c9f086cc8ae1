package numfmt

import "testing"

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 12: "12", 999: "999", 1000: "1,000", -1000: "-1,000", 1234567: "1,234,567", -12345678: "-12,345,678"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[float64]string{0: "0 B", 512: "512 B", 1536: "1.5 KiB", 8 << 30: "8.0 GiB", 5.6 * (1 << 40): "5.6 TiB", 1e25: "8673617.4 EiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%g) = %q, want %q", n, got, want)
		}
	}
}
