//go:build unix

package notebook

import (
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/janpfeifer/gonb/gonbui/protocol"
)

// fakeGoNB stands in for the kernel: it reads the DisplayData messages
// gonbui writes to GONB_PIPE and holds GONB_PIPE_BACK open.
type fakeGoNB struct {
	mu   sync.Mutex
	msgs []protocol.DisplayData
	seen chan struct{}
	seq  int
}

var (
	gonb     *fakeGoNB
	holdBack *os.File

	ackMu   sync.Mutex
	ackCond = sync.NewCond(&ackMu)
	ackEnc  *gob.Encoder
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(cellEnv); spec != "" {
		os.Exit(runCell(spec)) // a cell process of TestCellsAsProcesses
	}
	dir, err := os.MkdirTemp("", "forge-notebook-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	w, r := filepath.Join(dir, "gonb_pipe"), filepath.Join(dir, "gonb_pipe_back")
	for _, p := range []string{w, r} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			panic(err)
		}
	}
	os.Setenv(protocol.GONB_PIPE_ENV, w)
	os.Setenv(protocol.GONB_PIPE_BACK_ENV, r)
	gonb = &fakeGoNB{seen: make(chan struct{}, 1)}
	go func() {
		f, err := os.OpenFile(w, os.O_RDONLY, 0)
		if err != nil {
			panic(err)
		}
		dec := gob.NewDecoder(f)
		for {
			var d protocol.DisplayData
			if err := dec.Decode(&d); err != nil {
				return
			}
			// Answer gonbui.Sync as GoNB does, and keep sync requests
			// out of the recorded messages.
			var cv *protocol.CommValue
			switch v := d.Data[protocol.MIMECommValue].(type) {
			case *protocol.CommValue:
				cv = v
			case protocol.CommValue:
				cv = &v
			}
			if cv != nil && cv.Address == "#gonbui/sync" {
				ackMu.Lock()
				for ackEnc == nil {
					ackCond.Wait()
				}
				err := ackEnc.Encode(&protocol.CommValue{Address: protocol.GonbuiSyncAckAddress, Value: cv.Value})
				ackMu.Unlock()
				if err != nil {
					panic(err)
				}
				continue
			}
			gonb.mu.Lock()
			gonb.msgs = append(gonb.msgs, d)
			gonb.mu.Unlock()
			select {
			case gonb.seen <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		f, err := os.OpenFile(r, os.O_WRONLY, 0)
		if err != nil {
			panic(err)
		}
		ackMu.Lock()
		holdBack = f // held open: sync acknowledgements go back through it
		ackEnc = gob.NewEncoder(f)
		ackCond.Broadcast()
		ackMu.Unlock()
	}()
	gonbui.IsNotebook = true
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// capture runs fn in "notebook" mode and returns the messages it sent,
// waiting for a sentinel so none is still in the pipe.
func capture(t *testing.T, fn func()) []protocol.DisplayData {
	t.Helper()
	gonbui.IsNotebook = true
	gonb.mu.Lock()
	gonb.msgs = nil
	gonb.seq++
	sentinel := fmt.Sprintf("<!--sentinel %d-->", gonb.seq)
	gonb.mu.Unlock()
	fn()
	gonbui.DisplayHTML(sentinel)
	deadline := time.After(10 * time.Second)
	for {
		gonb.mu.Lock()
		n := len(gonb.msgs)
		if n > 0 && gonb.msgs[n-1].Data[protocol.MIMETextHTML] == sentinel {
			out := gonb.msgs[:n-1]
			gonb.mu.Unlock()
			return out
		}
		gonb.mu.Unlock()
		select {
		case <-gonb.seen:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("the fake GoNB did not receive the sentinel; gonbui error: %v", gonbui.Error())
		}
	}
}

func htmlOf(t *testing.T, d protocol.DisplayData) string {
	t.Helper()
	s, ok := d.Data[protocol.MIMETextHTML].(string)
	if !ok {
		t.Fatalf("message without text/html: %v", d.Data)
	}
	return s
}

// resetLibrary makes the next chart send the echarts library again, as
// in a new cell process.
func resetLibrary() {
	libMu.Lock()
	libSent = false
	libMu.Unlock()
}

// isLibrary reports whether h carries the (compressed) echarts library.
func isLibrary(h string) bool {
	return strings.Contains(h, "forge-echarts-data") && len(h) > 300_000
}

// textMode runs fn outside a notebook and returns what it printed.
func textMode(t *testing.T, fn func()) string {
	t.Helper()
	var b strings.Builder
	old := out
	out = &b
	gonbui.IsNotebook = false
	defer func() { out = old; gonbui.IsNotebook = true }()
	fn()
	return b.String()
}
