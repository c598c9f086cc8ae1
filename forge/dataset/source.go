// Package dataset turns text from real sources into token shards without
// holding the corpus in memory: plain text files and directories,
// JSON Lines, Parquet, and Hugging Face datasets (from the hub over HTTPS,
// or from a local Hugging Face cache), alone or mixed with weights.
//
// A Source streams documents. A Mixture interleaves several by weight.
// Prepare reads a mixture once to train a tokenizer on a sample (unless
// one is given) and again to encode it on every core in chunks, writing
// llm.c token files in shards of a set size under train/ and val/, with
// progress and a report of what each source contributed. Memory stays
// bounded by the chunks in flight, whatever the corpus size.
//
// Parquet is read with github.com/parquet-go/parquet-go: pure Go (Forge
// uses no cgo), maintained, and it decodes every codec the hub's Parquet
// files use (Snappy, Zstandard, gzip, Brotli, LZ4), a column at a time,
// so only the text column's pages are read.
package dataset

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kinds of sources.
const (
	KindText    = "text"    // plain text: each file one document
	KindJSONL   = "jsonl"   // JSON Lines: each line an object, Field its text
	KindParquet = "parquet" // Parquet: each row's Field column
	KindHub     = "hf"      // a Hugging Face dataset (its Parquet files)
)

// Source is one stream of documents.
type Source struct {
	Name   string   // as the user named it (a path, a glob, hf:org/name, a preset)
	Kind   string   // KindText, KindJSONL, KindParquet or KindHub
	Paths  []string // local files, resolved (text, jsonl, parquet)
	Field  string   // the text field (JSONL, Parquet, hub); "text" when empty
	Weight float64  // share in a mixture (> 0)

	// Hub datasets.
	Repo    string // org/name
	Config  string // "default" when empty
	Split   string // "train" when empty
	Licence string // from a preset, for the report

	hub *Hub // how a hub source is fetched (nil: DefaultHub)
}

// SetHub makes a hub source fetch through h (DefaultHub otherwise).
func (s *Source) SetHub(h *Hub) { s.hub = h }

// field is the text field with its default.
func (s *Source) field() string {
	if s.Field == "" {
		return "text"
	}
	return s.Field
}

// ParseSource reads a source spec: a file, a directory (every file under
// it), a glob, or hf:org/name[/config][@split], optionally followed by
// :weight. The kind of a file comes from its extension (.jsonl, .json,
// .parquet; anything else is text). Errors name the spec.
func ParseSource(spec, field string) (*Source, error) {
	name, weight, err := splitWeight(spec)
	if err != nil {
		return nil, err
	}
	s := &Source{Name: name, Weight: weight, Field: field}
	if rest, ok := strings.CutPrefix(name, "hf:"); ok {
		s.Kind = KindHub
		repo, split, _ := strings.Cut(rest, "@")
		parts := strings.Split(repo, "/")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("dataset: %s: want hf:org/name, hf:org/name/config or hf:org/name/config@split", spec)
		}
		s.Repo = parts[0] + "/" + parts[1]
		if len(parts) == 3 {
			s.Config = parts[2]
		}
		s.Split = split
		return s, nil
	}
	paths, err := expand(name)
	if err != nil {
		return nil, err
	}
	kinds := map[string]bool{}
	for _, p := range paths {
		kinds[kindOf(p)] = true
	}
	if len(kinds) > 1 {
		return nil, fmt.Errorf("dataset: %s mixes kinds of files (%s); give each kind as its own source", name, strings.Join(sortedKeys(kinds), ", "))
	}
	s.Kind, s.Paths = kindOf(paths[0]), paths
	return s, nil
}

// splitWeight cuts a trailing :weight from spec. A weight must be a
// positive number.
func splitWeight(spec string) (string, float64, error) {
	i := strings.LastIndexByte(spec, ':')
	if i <= 0 || i == len(spec)-1 {
		return spec, 1, nil
	}
	w, err := strconv.ParseFloat(spec[i+1:], 64)
	if err != nil {
		return spec, 1, nil // a colon that is part of the name (hf:…)
	}
	name := spec[:i]
	if !(w > 0) || w != w || w > 1e12 {
		return "", 0, fmt.Errorf("dataset: %s: weight %s must be a positive number (the source's share of the mixture)", name, spec[i+1:])
	}
	return name, w, nil
}

// expand resolves a file, a directory or a glob to regular files, sorted.
func expand(name string) ([]string, error) {
	var paths []string
	if strings.ContainsAny(name, "*?[") {
		m, err := filepath.Glob(name)
		if err != nil {
			return nil, fmt.Errorf("dataset: %s: bad pattern: %v", name, err)
		}
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				paths = append(paths, p)
			}
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("dataset: %s matches no files", name)
		}
		return paths, nil
	}
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: no such file or directory", name)
	}
	if !fi.IsDir() {
		return []string{name}, nil
	}
	err = filepath.WalkDir(name, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %v", name, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("dataset: %s: the directory holds no files", name)
	}
	sort.Strings(paths)
	return paths, nil
}

func kindOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".json", ".ndjson":
		return KindJSONL
	case ".parquet":
		return KindParquet
	}
	return KindText
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Documents calls fn with every document of the source, in order. It
// stops at the first error, fn's or the source's; a source's errors name
// the file and the line or row. A source that yields no document at all
// is an error too.
func (s *Source) Documents(ctx context.Context, fn func(doc string) error) error {
	n := 0
	count := func(doc string) error {
		n++
		return fn(doc)
	}
	var err error
	switch s.Kind {
	case KindText:
		err = s.eachFile(ctx, func(p string) error { return textDocuments(p, count) })
	case KindJSONL:
		err = s.eachFile(ctx, func(p string) error { return jsonlDocuments(p, s.field(), count) })
	case KindParquet:
		err = s.eachFile(ctx, func(p string) error { return parquetDocuments(ctx, p, s.field(), count) })
	case KindHub:
		hub := s.hub
		if hub == nil {
			hub = DefaultHub()
		}
		var files []string
		if files, err = hub.Files(ctx, s); err == nil {
			for _, p := range files {
				if err = parquetDocuments(ctx, p, s.field(), count); err != nil {
					break
				}
			}
		}
	default:
		err = fmt.Errorf("dataset: %s: unknown kind %q", s.Name, s.Kind)
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("dataset: %s: the source is empty (no documents with text); check the path%s", s.Name, map[bool]string{true: " and --field", false: ""}[s.Kind != KindText])
	}
	return nil
}

func (s *Source) eachFile(ctx context.Context, f func(path string) error) error {
	for _, p := range s.Paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f(p); err != nil {
			return err
		}
	}
	return nil
}

// maxLine bounds a JSON line (and a text file's piece).
const maxLine = 64 << 20

// textDocuments streams a text file as one document, refusing bytes that
// are not UTF-8 with the line they are on. Large files are passed on in
// pieces of about 4 MB cut after a blank line or newline, which the
// pipeline treats as one document continued.
func textDocuments(path string, fn func(string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("dataset: %v", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var piece strings.Builder
	line := 0
	for {
		b, err := r.ReadSlice('\n')
		if len(b) > 0 {
			line++
			if !utf8.Valid(b) {
				return fmt.Errorf("dataset: %s: line %d is not UTF-8; convert the file (iconv -f latin1 -t utf-8, say) or leave it out", path, line)
			}
			piece.Write(b)
			if piece.Len() >= 4<<20 && err == nil { // at a line's end
				if err := fn(piece.String()); err != nil {
					return err
				}
				piece.Reset()
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("dataset: reading %s: %v", path, err)
		}
	}
	if piece.Len() > 0 && strings.TrimSpace(piece.String()) != "" {
		return fn(piece.String())
	}
	return nil
}

// jsonlDocuments streams the field of each line's object.
func jsonlDocuments(path, field string, fn func(string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("dataset: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		if !utf8.Valid(b) {
			return fmt.Errorf("dataset: %s:%d: the line is not UTF-8; fix or drop it", path, line)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("dataset: %s:%d: not a JSON object (%v); JSON Lines files hold one object per line", path, line, err)
		}
		raw, ok := obj[field]
		if !ok {
			return fmt.Errorf("dataset: %s:%d: no field %q (the line has %s); choose the text field with --field", path, line, field, strings.Join(keysOf(obj), ", "))
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			if string(raw) == "null" {
				continue
			}
			return fmt.Errorf("dataset: %s:%d: field %q is not a string", path, line, field)
		}
		if text == "" {
			continue
		}
		if err := fn(text); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("dataset: %s:%d: a line longer than %d MB; is this JSON Lines?", path, line+1, maxLine>>20)
		}
		return fmt.Errorf("dataset: reading %s: %v", path, err)
	}
	return nil
}

func keysOf(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, strconv.Quote(k))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"no fields"}
	}
	return out
}
