package emu

import (
	"fmt"
	"slices"
	"testing"
)

// TestMissingBarrier: reverse_tg without its barrier gives results that
// depend on the schedule (and are wrong under at least one); with the
// barrier every schedule gives the same, right result.
func TestMissingBarrier(t *testing.T) {
	d := testDriver(t)
	const groups, n = 3, 256
	in := make([]float32, groups*n)
	for i := range in {
		in[i] = float32(i)
	}
	want := make([]float32, groups*n)
	for g := 0; g < groups; g++ {
		for i := 0; i < n; i++ {
			want[g*n+i] = in[g*n+n-1-i]
		}
	}
	p := pipe(t, d, "reverse_tg")
	bin := f32buf(t, d, in)
	for _, barrier := range []uint32{1, 0} {
		results := map[string][]float32{}
		withSchedules(d, func(name string) {
			out := f32buf(t, d, make([]float32, groups*n))
			if err := run(d, p, [3]int{groups, 1, 1}, [3]int{n, 1, 1}, bufArg(bin), bufArg(out), bytesArg(u32bytes(barrier))); err != nil {
				t.Fatal(err)
			}
			results[name] = f32s(out)
		})
		if barrier == 1 {
			for name, r := range results {
				if !slices.Equal(r, want) {
					t.Errorf("with barrier, %s schedule: wrong result", name)
				}
			}
			continue
		}
		wrong, differ := 0, false
		for name, r := range results {
			if !slices.Equal(r, want) {
				wrong++
			}
			if !slices.Equal(r, results["forward"]) {
				differ = true
			}
			_ = name
		}
		if wrong == 0 || !differ {
			t.Errorf("without barrier: %d of %d schedules wrong, results differ: %v (want a schedule-dependent, wrong result)", wrong, len(results), differ)
		}
		t.Logf("missing barrier: %d of %d schedules give a wrong result", wrong, len(results))
	}
}

// TestDivergentBarrier: threads waiting at different barriers is an error
// naming both lines, not a hang.
func TestDivergentBarrier(t *testing.T) {
	d := testDriver(t)
	out := f32buf(t, d, make([]float32, 64))
	err := run(d, pipe(t, d, "divergent_barrier"), [3]int{1, 1, 1}, [3]int{64, 1, 1}, bufArg(out))
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
	for _, s := range []string{"divergent", "sched.metal:"} {
		if !contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }
func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

var _ = fmt.Sprint
