package data

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/forgeml/forge/internal/atomicfile"
)

// ManifestFile names the files of a prepared directory (`forge prepare`'s
// output, or a cached corpus) with their sizes and SHA-256 digests. It is
// removed before any file of the set is rewritten and written after the
// last one, so a set without a manifest, or whose files do not match it,
// is one a writer did not finish: an older tokenizer beside newer token
// files, say. VerifyManifest refuses such a set.
const ManifestFile = "manifest.json"

const manifestFormat = "forge-prepared"

type manifest struct {
	Format string          `json:"format"`
	Files  []manifestEntry `json:"files"`
}

type manifestEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// RemoveManifest removes dir's manifest, if any: call it before
// rewriting any file of the set.
func RemoveManifest(dir string) error {
	err := os.Remove(filepath.Join(dir, ManifestFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data: %v", err)
	}
	atomicfile.SyncDir(dir)
	return nil
}

// WriteManifest records the named files of dir (sizes and digests) in its
// manifest, atomically: call it once every file of the set is written.
func WriteManifest(dir string, names ...string) error {
	m := manifest{Format: manifestFormat}
	for _, n := range names {
		size, sum, err := digest(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil {
			return fmt.Errorf("data: manifest: %v", err)
		}
		m.Files = append(m.Files, manifestEntry{Name: n, Size: size, SHA256: sum})
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	return atomicfile.WriteBytes(filepath.Join(dir, ManifestFile), append(b, '\n'))
}

// VerifyManifest checks that dir holds the complete set its manifest
// names: every file there, of its size and digest. The error says which
// file differs and what to do.
func VerifyManifest(dir string) error {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data: %s has no %s: it was not written by forge prepare, or its writing was interrupted; run forge prepare again", dir, ManifestFile)
	}
	if err != nil {
		return fmt.Errorf("data: %v", err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != manifestFormat || len(m.Files) == 0 {
		return fmt.Errorf("data: %s is damaged; run forge prepare again", path)
	}
	for _, f := range m.Files {
		// A name is a file of the directory or of a subdirectory (the
		// shards train/000000.bin), written with slashes; nothing outside.
		if !filepath.IsLocal(filepath.FromSlash(f.Name)) || strings.ContainsRune(f.Name, '\\') {
			return fmt.Errorf("data: %s names %q, not a file inside its directory; run forge prepare again", path, f.Name)
		}
		size, sum, err := digest(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil {
			return fmt.Errorf("data: %s: %v; run forge prepare again", dir, err)
		}
		if size != f.Size || sum != f.SHA256 {
			return fmt.Errorf("data: %s is not the file its manifest records (%d bytes, sha256 %.12s…; found %d bytes, %.12s…): the set was changed or its writing interrupted; run forge prepare again",
				filepath.Join(dir, f.Name), f.Size, f.SHA256, size, sum)
		}
	}
	return nil
}

// FileDigest returns a file's size and SHA-256 (hex), streamed: on an
// Intel Xeon core (SHA-NI), 0.76–0.86 s for 1 GB from the page cache.
func FileDigest(path string) (size int64, sha256hex string, err error) { return digest(path) }

// digest returns a file's size and SHA-256, streamed.
func digest(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
