package emu

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/forgeml/forge/metal/driver"
)

// testSources reads testdata/*.metal.
func testSources(t testing.TB) map[string]string {
	t.Helper()
	m, err := filepath.Glob("testdata/*.metal")
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]string{}
	for _, f := range m {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src[filepath.Base(f)] = string(b)
	}
	return src
}

var (
	testDrvOnce sync.Once
	testDrv     *Driver
	testDrvErr  error
)

// testDriver opens (once) the driver of testdata/*.metal.
func testDriver(t testing.TB) *Driver {
	t.Helper()
	testDrvOnce.Do(func() {
		if _, _, err := findClang(); err != nil {
			testDrvErr = err
			return
		}
		testDrv, testDrvErr = Open(testSources(t), Options{Threads: 2})
	})
	if testDrvErr != nil {
		if _, _, err := findClang(); err != nil {
			t.Skip(err)
		}
		t.Fatal(testDrvErr)
	}
	return testDrv
}

func f32buf(t testing.TB, d *Driver, xs []float32) driver.Buffer {
	t.Helper()
	b, err := d.NewBuffer(4 * len(xs))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b.Bytes()[4*i:], math.Float32bits(x))
	}
	return b
}

func f32s(b driver.Buffer) []float32 {
	out := make([]float32, b.Size()/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b.Bytes()[4*i:]))
	}
	return out
}

func u32bytes(xs ...uint32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func f32bytes(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func pipe(t testing.TB, d *Driver, name string, consts ...driver.Constant) driver.Pipeline {
	t.Helper()
	p, err := d.Pipeline(driver.PipelineKey{Kernel: name, Constants: consts})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run encodes one dispatch, runs it and returns Wait's error.
func run(d *Driver, p driver.Pipeline, groups, threads [3]int, args ...driver.Arg) error {
	cb := d.NewCommandBuffer()
	cb.Encode(driver.Dispatch{Pipeline: p, Args: args, Groups: groups, Threads: threads, Label: p.Key().Kernel})
	cb.Commit()
	return cb.Wait()
}

func bufArg(b driver.Buffer) driver.Arg { return driver.Arg{Buf: b} }
func bytesArg(b []byte) driver.Arg      { return driver.Arg{Bytes: b} }

var schedules = []struct {
	name string
	s    Schedule
	seed uint64
}{{"forward", Forward, 0}, {"reverse", Reverse, 0}, {"random1", Random, 1}, {"random2", Random, 2}, {"random3", Random, 3}}

// withSchedules runs f under every schedule (restoring Forward after).
func withSchedules(d *Driver, f func(name string)) {
	for _, s := range schedules {
		d.SetSchedule(s.s, s.seed)
		f(s.name)
	}
	d.SetSchedule(Forward, 0)
}

func dispatch(p driver.Pipeline, groups, threads [3]int, args ...driver.Arg) driver.Dispatch {
	return driver.Dispatch{Pipeline: p, Args: args, Groups: groups, Threads: threads, Label: p.Key().Kernel}
}
