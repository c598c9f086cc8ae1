package data

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeShards writes shard k with tokens k·1000 + i, i < sizes[k].
func writeShards(t *testing.T, dir string, sizes ...int) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	for k, n := range sizes {
		v := make([]uint16, n)
		for i := range v {
			v[i] = uint16(k*1000 + i)
		}
		if err := WriteTokens(filepath.Join(dir, fmt.Sprintf("%06d.bin", k)), v); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoaderOverShards(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "train")
	writeShards(t, dir, 40, 100, 300)
	const B, T = 4, 8
	l, err := OpenLoader(dir, B, T, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Shards() != 3 || l.Tokens() != 440 {
		t.Fatalf("%d shards, %d tokens", l.Shards(), l.Tokens())
	}
	seen := map[int]int{}
	for range 500 {
		x, y := l.Next()
		for b := range B {
			w, v := x[b*T:(b+1)*T], y[b*T:(b+1)*T]
			k := int(w[0]) / 1000
			for i := range T {
				// Consecutive tokens of one shard: no window spans two.
				if int(w[i]) != int(w[0])+i || int(v[i]) != int(w[0])+i+1 || int(v[i])/1000 != k {
					t.Fatalf("window %v → %v is not a run of one shard", w, v)
				}
			}
			seen[k]++
		}
	}
	// Window starts are uniform over all shards: 32, 92 and 292 of 416.
	for k, want := range []float64{32, 92, 292} {
		got := float64(seen[k]) / 2000
		if d := got - want/416; d > 0.04 || d < -0.04 {
			t.Errorf("shard %d drew %.3f of the windows, want %.3f", k, got, want/416)
		}
	}
	// The state resumes the sequence exactly, in a new loader.
	st := l.State()
	a, _ := l.Next()
	l2, _ := OpenLoader(dir, B, T, 1)
	defer l2.Close()
	if err := l2.SetState(st); err != nil {
		t.Fatal(err)
	}
	if b, _ := l2.Next(); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("a restored state draws other windows")
	}
	// Eval walks each shard's whole windows, shard after shard.
	var firsts []int32
	for x := range l.Eval(0) {
		for w := 0; w < len(x)/T; w++ {
			firsts = append(firsts, x[w*T])
		}
	}
	if len(firsts) != 4+12+37 || l.EvalWindows() != 53 || firsts[0] != 0 || firsts[4] != 1000 || firsts[16] != 2000 {
		t.Fatalf("eval windows %d: %v", len(firsts), firsts)
	}
	// A state of other files is refused.
	one := filepath.Join(t.TempDir(), "one.bin")
	v := make([]uint16, 440)
	WriteTokens(one, v)
	l3, _ := OpenLoader(one, B, T, 1)
	defer l3.Close()
	if err := l3.SetState(st); err == nil || !strings.Contains(err.Error(), "3 shards") {
		t.Fatalf("a shard state on one file: %v", err)
	}
	empty := t.TempDir()
	if _, err := OpenLoader(empty, B, T, 1); err == nil || !strings.Contains(err.Error(), "no token files") {
		t.Fatalf("an empty directory: %v", err)
	}
}
