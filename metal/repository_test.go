package metal

import (
	"math"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/forge/train"
)

// TestMapRepositoryOnDevice maps a committed model on the test device:
// every weight is the mapped shard itself (a no-copy buffer, counted in
// PoolStats.Mapped, not in the pool), the loss over it equals the copied
// model's bit for bit, and the buffers are released once the model is
// gone.
func TestMapRepositoryOnDevice(t *testing.T) {
	dev := openTestDevice(t)
	useDevice(t, dev)
	mb := backendOf(dev)
	cfg := trainConfig(1)
	repo := filepath.Join(t.TempDir(), "m.forge")
	func() {
		m, err := gpt.New(cfg.Model, cfg.Seed)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := train.CommitModel(repo, m, tokenizer.TrainChar("abcdefgh"), cfg, 0, train.CommitOptions{}); err != nil {
			t.Fatal(err)
		}
	}()
	base := mb.PoolStats().Mapped
	ids := make([]int32, 2*cfg.Model.Context)
	for i := range ids {
		ids[i] = int32(i*5) % int32(cfg.Model.Vocab)
	}
	n := cfg.Model.Context
	loss := func(s *train.Snapshot) float64 {
		var l float64
		forge.NoGrad(func() {
			l = s.Model.Loss(forge.FromSlice(ids[:n], 1, n), forge.FromSlice(ids[n:], 1, n)).Item()
		})
		return l
	}
	copied, err := train.LoadRepository(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	want := loss(copied)
	func() {
		mapped, err := train.MapRepository(repo, "")
		if err != nil {
			t.Fatal(err)
		}
		params := mapped.Model.Params()
		if mapped.Mapped != len(params) {
			t.Fatalf("mapped %d of %d parameters on %s", mapped.Mapped, len(params), dev.Name())
		}
		var bytes int64
		for _, p := range params {
			bytes += int64(4 * p.Tensor.Numel())
		}
		if got := mb.PoolStats().Mapped - base; got < bytes {
			t.Fatalf("PoolStats.Mapped grew by %d bytes for %d bytes of weights", got, bytes)
		}
		if got := loss(mapped); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("loss %v over the mapped weights, %v over copies", got, want)
		}
	}()
	for i := 0; i < 200 && mb.PoolStats().Mapped != base; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		dev.Sync() // releases the collected buffers whose kernels completed
	}
	if got := mb.PoolStats().Mapped; got != base {
		t.Fatalf("%d bytes still mapped after the model died", got-base)
	}
}
