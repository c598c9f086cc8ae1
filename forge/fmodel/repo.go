package fmodel

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/forgeml/forge/internal/atomicfile"
	"github.com/forgeml/forge/internal/flock"
)

// Names inside a repository.
const (
	HeadFile     = "HEAD"
	ManifestDir  = "manifests"
	ShardDir     = "shards"
	LockFile     = "lock"
	manifestExt  = ".json"
	shardExt     = ".bin"
	minRevPrefix = 4
)

// Repo is a repository on disk.
type Repo struct {
	Dir string
}

// IsRepository reports whether dir looks like a repository (it has a
// manifests directory and a HEAD or shards beside it).
func IsRepository(dir string) bool {
	if fi, err := os.Stat(filepath.Join(dir, ManifestDir)); err != nil || !fi.IsDir() {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, HeadFile))
	return err == nil
}

// Open opens the repository in dir for reading.
func Open(dir string) (*Repo, error) {
	if !IsRepository(dir) {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("fmodel: %s: no such repository (create one with `forge export --format forge --out %s`)", dir, dir)
		}
		return nil, fmt.Errorf("fmodel: %s is not a .forge repository (no %s and %s/)", dir, HeadFile, ManifestDir)
	}
	return &Repo{Dir: dir}, nil
}

// Head returns the hash of the current revision.
func (r *Repo) Head() (string, error) {
	b, err := os.ReadFile(filepath.Join(r.Dir, HeadFile))
	if err != nil {
		return "", fmt.Errorf("fmodel: %v", err)
	}
	h := strings.TrimSpace(string(b))
	if !isHash(h) {
		return "", fmt.Errorf("fmodel: %s: HEAD holds %q, not a revision hash; pick a revision from `forge model log %s --all` and `forge model checkout` it", r.Dir, truncate(h, 80), r.Dir)
	}
	return h, nil
}

// Resolve turns a revision name into a manifest hash: "" or "HEAD" (the
// current revision), "HEAD~N" (its N-th ancestor), or a full hash or a
// unique prefix of at least 4 hex digits.
func (r *Repo) Resolve(rev string) (string, error) {
	if rev == "" || rev == "HEAD" {
		return r.Head()
	}
	if rest, ok := strings.CutPrefix(rev, "HEAD~"); ok {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return "", fmt.Errorf("fmodel: revision %q: want HEAD~N with N >= 0", rev)
		}
		h, err := r.Head()
		if err != nil {
			return "", err
		}
		for i := 0; i < n; i++ {
			m, err := r.Manifest(h)
			if err != nil {
				return "", err
			}
			if m.Parent == "" {
				return "", fmt.Errorf("fmodel: revision %q: the history has only %d revision(s) before HEAD", rev, i)
			}
			h = m.Parent
		}
		return h, nil
	}
	rev = strings.ToLower(rev)
	if len(rev) < minRevPrefix || strings.Trim(rev, "0123456789abcdef") != "" {
		return "", fmt.Errorf("fmodel: revision %q: want HEAD, HEAD~N or at least %d hex digits of a revision hash", rev, minRevPrefix)
	}
	hashes, err := r.Revisions()
	if err != nil {
		return "", err
	}
	var found []string
	for _, h := range hashes {
		if strings.HasPrefix(h, rev) {
			found = append(found, h)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("fmodel: %s has no revision %s (see `forge model log %s`)", r.Dir, rev, r.Dir)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("fmodel: revision %s is ambiguous in %s: %d revisions start with it; give more digits", rev, r.Dir, len(found))
}

// Revisions lists the hashes of every manifest stored, sorted.
func (r *Repo) Revisions() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(r.Dir, ManifestDir))
	if err != nil {
		return nil, fmt.Errorf("fmodel: %v", err)
	}
	var hs []string
	for _, e := range ents {
		if h, ok := strings.CutSuffix(e.Name(), manifestExt); ok && isHash(h) {
			hs = append(hs, h)
		}
	}
	sort.Strings(hs)
	return hs, nil
}

// Manifest reads and validates the manifest with the given hash, checking
// that its bytes hash to its name.
func (r *Repo) Manifest(hash string) (*Manifest, error) {
	if !isHash(hash) {
		return nil, fmt.Errorf("fmodel: %q is not a revision hash", hash)
	}
	path := filepath.Join(r.Dir, ManifestDir, hash+manifestExt)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("fmodel: %s: revision %s is missing (%s)", r.Dir, short(hash), path)
		}
		return nil, fmt.Errorf("fmodel: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fmodel: reading %s: %v", path, err)
	}
	if got := hexHash(sha256.Sum256(b)); got != hash {
		return nil, fmt.Errorf("fmodel: %s is damaged: its content hashes to %s, not its name; check out another revision (`forge model log %s`)", path, short(got), r.Dir)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("fmodel: %s: %v", path, err)
	}
	return m, nil
}

// Revision is one entry of Log.
type Revision struct {
	Hash     string
	Manifest *Manifest
}

// Log returns the history from rev back to the first revision, newest
// first. A missing or damaged ancestor ends the walk with an error along
// with the revisions read so far.
func (r *Repo) Log(rev string) ([]Revision, error) {
	h, err := r.Resolve(rev)
	if err != nil {
		return nil, err
	}
	var out []Revision
	seen := map[string]bool{}
	for h != "" {
		if seen[h] {
			return out, fmt.Errorf("fmodel: %s: the history loops at %s", r.Dir, short(h))
		}
		seen[h] = true
		m, err := r.Manifest(h)
		if err != nil {
			return out, err
		}
		out = append(out, Revision{Hash: h, Manifest: m})
		h = m.Parent
	}
	return out, nil
}

// Checkout makes rev the current revision: later reads see it and the
// next commit's parent is it (like git reset; nothing is deleted).
func (r *Repo) Checkout(rev string) (string, error) {
	l, err := lock(r.Dir)
	if err != nil {
		return "", err
	}
	defer unlock(l)
	h, err := r.Resolve(rev)
	if err != nil {
		return "", err
	}
	if _, err := r.Manifest(h); err != nil {
		return "", err
	}
	if err := atomicfile.WriteBytes(filepath.Join(r.Dir, HeadFile), []byte(h+"\n")); err != nil {
		return "", fmt.Errorf("fmodel: writing %s: %v", filepath.Join(r.Dir, HeadFile), err)
	}
	return h, nil
}

// lock takes the repository's writer lock, or says who holds it.
func lock(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fmodel: locking %s: %v", dir, err)
	}
	if err := flock.TryLock(f); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 256))
		f.Close()
		if errors.Is(err, flock.ErrLocked) {
			who := strings.TrimSpace(string(b))
			if who == "" {
				who = "another process"
			}
			return nil, fmt.Errorf("fmodel: %s is being written by %s; wait for it to finish", dir, who)
		}
		return nil, fmt.Errorf("fmodel: locking %s: %v", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// short is the 12-digit form of a hash used in messages and logs.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Short is the 12-digit form of a revision hash.
func Short(h string) string { return short(h) }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
