package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/forgeml/forge/internal/flock"
)

// LockFile is the file of a run directory that its one writer holds
// locked (flock, exclusive) for as long as the run is open for writing.
// The lock belongs to the open file, so the kernel drops it when the
// holder exits, however it exits: a run left by a killed process is
// simply free. The file's content says who holds it, for the refusal
// a second writer gets; it is not the lock, and readers (Load: `forge
// eval`, `generate`, `export`, `info`) never look at it.
const LockFile = "lock"

// lockHolder is what the lock file records about its holder.
type lockHolder struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Since   string `json:"since"` // RFC 3339, UTC
}

func (h lockHolder) String() string {
	if h.PID == 0 {
		return "a process that has not said who it is yet"
	}
	return fmt.Sprintf("pid %d (%s), since %s", h.PID, h.Command, h.Since)
}

// runLock is a held lock on a run directory.
type runLock struct{ f *os.File }

// lockRun takes the writer's lock on the run directory dir (which exists),
// or says who holds it.
func lockRun(dir string) (*runLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: locking %s: %v", dir, err)
	}
	if err := flock.TryLock(f); err != nil {
		h := readHolder(f)
		f.Close()
		if errors.Is(err, flock.ErrLocked) {
			return nil, fmt.Errorf("train: %s is open for writing by %s; wait for it to finish or stop it (reading with eval, generate, export or info needs no lock)", dir, h)
		}
		return nil, fmt.Errorf("train: locking %s: %v", path, err)
	}
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	b, _ := json.Marshal(lockHolder{PID: os.Getpid(), Command: cmd, Since: time.Now().UTC().Format(time.RFC3339)})
	if err := f.Truncate(0); err == nil {
		f.WriteAt(append(b, '\n'), 0) // best effort: only the refusal message reads it
	}
	return &runLock{f: f}, nil
}

// release drops the lock (and clears the holder's record).
func (l *runLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.f.Truncate(0)
	err := l.f.Close() // closing the file drops the lock
	l.f = nil
	return err
}

// lockHolderOf describes who holds dir's lock, or "" if nobody does: it
// takes the lock for a moment to find out, and gives it back.
func lockHolderOf(dir string) string {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR, 0)
	if err != nil {
		return "" // no lock file: never opened for writing by this version
	}
	defer f.Close()
	if err := flock.TryLock(f); err == nil {
		return "" // closing f releases it
	}
	return readHolder(f).String()
}

// readHolder reads the holder's record from an open lock file (zero if it
// is empty or being written).
func readHolder(f *os.File) lockHolder {
	var h lockHolder
	if b, err := io.ReadAll(io.LimitReader(f, 4096)); err == nil {
		json.Unmarshal(b, &h)
	}
	return h
}
