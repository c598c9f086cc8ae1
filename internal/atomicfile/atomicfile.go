// Package atomicfile writes files so that a crash at any moment leaves
// either the old file or the complete new one: the bytes go to a
// temporary file in the same directory, which is synced, given the old
// file's permissions (0644 less the umask for a new file) and renamed over the path; the
// directory is then synced where the platform allows it. Every package
// that saves user data (token files, tokenizers, checkpoints, configs,
// metrics) writes through it.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Write creates or replaces path with what write produces. On any error
// the temporary file is removed, path is unchanged, and the error says
// which step failed.
func Write(path string, write func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	var keep fs.FileMode // the permissions of the file replaced, if any
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
		keep = fi.Mode().Perm()
	}
	f, err := createTemp(dir, filepath.Base(path))
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w (does the directory exist and is it writable?)", err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if keep != 0 && runtime.GOOS != "windows" {
		if err := f.Chmod(keep); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	SyncDir(dir)
	return nil
}

// WriteBytes creates or replaces path with b, atomically.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// SyncDir makes the renames in dir durable where the platform allows it;
// it is best effort (Windows cannot sync a directory handle, and renames
// there are durable once they return).
func SyncDir(dir string) {
	if runtime.GOOS == "windows" {
		return
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// createTemp creates a new file named .<base>.tmp-<random> in dir with mode
// 0644 less the umask (os.CreateTemp would use 0600).
func createTemp(dir, base string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("too many name collisions in %s", dir)
}

// MkdirTemp creates a new directory named prefix<random> in dir and
// returns its path: os.MkdirTemp, except that the directory gets 0777
// less the umask, like any directory os.Mkdir makes, not 0700 (a run's
// checkpoints must be as readable as its other files).
func MkdirTemp(dir, prefix string) (string, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		err := os.Mkdir(name, 0o777)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("too many name collisions in %s", dir)
}

// IsTemp reports whether name (a base name) is one of Write's temporary
// files: what an interrupted Write leaves behind.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}
