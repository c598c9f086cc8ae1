package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// tokenFile builds a token file by hand, independently of MarshalTokens.
func tokenFile(magic, version, count int32, tokens ...uint16) []byte {
	b := make([]byte, HeaderBytes)
	binary.LittleEndian.PutUint32(b[0:], uint32(magic))
	binary.LittleEndian.PutUint32(b[4:], uint32(version))
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint16(b, t)
	}
	return b
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tokens := range [][]uint16{
		{},
		{0},
		{1, 2, 3, 65535, 0, 256},
		ramp(100_000), // more than one write buffer
	} {
		path := filepath.Join(dir, "t.bin")
		if err := WriteTokens(path, tokens); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := tokenFile(TokenMagic, TokenVersion, int32(len(tokens)), tokens...); !bytes.Equal(raw, want) {
			t.Fatalf("file for %d tokens differs from the format's layout", len(tokens))
		}
		m, err := MarshalTokens(tokens)
		if err != nil || !bytes.Equal(m, raw) {
			t.Fatalf("MarshalTokens differs from WriteTokens (err %v)", err)
		}
		got, err := ReadTokens(path)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tokens) {
			t.Fatalf("ReadTokens returned %d tokens, different from the %d written", len(got), len(tokens))
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after writing, want only t.bin (temporary files left?)", len(entries))
	}
}

func ramp(n int) []uint16 {
	t := make([]uint16, n)
	for i := range t {
		t[i] = uint16(i * 7)
	}
	return t
}

func TestWriteTokensInt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ids.bin")
	if err := WriteTokensInt(path, []int{0, 5, 65535}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTokens(path)
	if err != nil || !slices.Equal(got, []uint16{0, 5, 65535}) {
		t.Fatalf("ReadTokens = %v, %v", got, err)
	}
	for _, tc := range []struct {
		ids  []int
		want []string
	}{
		{[]int{1, 65536}, []string{"ids.bin", "65536", "position 1", "0..65535", "at most 65536"}},
		{[]int{-1}, []string{"ids.bin", "-1", "position 0", "negative"}},
	} {
		err := WriteTokensInt(path, tc.ids)
		if err == nil {
			t.Fatalf("WriteTokensInt(%v) succeeded", tc.ids)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("WriteTokensInt(%v): error %q lacks %q", tc.ids, err, w)
			}
		}
	}
	// The refused writes left the earlier file alone.
	if got, err := ReadTokens(path); err != nil || len(got) != 3 {
		t.Errorf("after refused writes ReadTokens = %v, %v", got, err)
	}
}

func TestWriteTokensKeepsModeAndReplaces(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	path := filepath.Join(t.TempDir(), "t.bin")
	if err := WriteTokens(path, []uint16{1}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("new file mode %v, want 0644", st.Mode().Perm())
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteTokens(path, []uint16{2, 3}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten file mode %v, want the old 0600", st.Mode().Perm())
	}
	if got, _ := ReadTokens(path); !slices.Equal(got, []uint16{2, 3}) {
		t.Errorf("rewritten file holds %v", got)
	}
}

func TestWriteTokensMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "t.bin")
	err := WriteTokens(path, []uint16{1})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "directory exist") {
		t.Errorf("WriteTokens into a missing directory: %v", err)
	}
}

func TestParseTokensErrors(t *testing.T) {
	good := tokenFile(TokenMagic, 1, 3, 10, 20, 30)
	reserved := tokenFile(TokenMagic, 1, 1, 7)
	binary.LittleEndian.PutUint32(reserved[4*17:], 99)
	bigEndian := bytes.Clone(good)
	binary.BigEndian.PutUint32(bigEndian, TokenMagic)

	for _, tc := range []struct {
		name string
		b    []byte
		kind error
		want []string
	}{
		{"empty", nil, ErrHeader, []string{"empty file", "1024-byte header", "forge prepare"}},
		{"short header", good[:100], ErrHeader, []string{"truncated header", "100 bytes", "needs 1024", "forge prepare"}},
		{"magic", tokenFile(12345, 1, 0), ErrNotTokenFile, []string{"not a token file (magic 0x00003039; want 20240520", "forge prepare"}},
		{"text", []byte("It is a truth universally acknowledged, that a single man"), ErrNotTokenFile,
			[]string{"not a token file (magic 0x", "looks like text", `"It is a truth`, "forge prepare"}},
		{"gzip", append([]byte{0x1f, 0x8b, 8, 0}, make([]byte, 40)...), ErrNotTokenFile, []string{"gzip-compressed", "decompress"}},
		{"big-endian", bigEndian, ErrNotTokenFile, []string{"big-endian"}},
		{"llm.c model", tokenFile(20240326, 3, 0), ErrNotTokenFile, []string{"llm.c model checkpoint", "train.bin or val.bin"}},
		{"llm.c tokenizer", tokenFile(20240328, 2, 0), ErrNotTokenFile, []string{"llm.c tokenizer file"}},
		{"zeros", make([]byte, 2048), ErrNotTokenFile, []string{"magic 0x00000000", "zero bytes"}},
		{"version 2", tokenFile(TokenMagic, 2, 0), ErrVersion, []string{"version 2", "uint32", "want version 1", "65536"}},
		{"version 7", tokenFile(TokenMagic, 7, 0), ErrVersion, []string{"unsupported version 7; want 1", "forge prepare"}},
		{"negative count", tokenFile(TokenMagic, 1, -5), ErrHeader, []string{"negative token count (-5)"}},
		{"reserved word", reserved, ErrHeader, []string{"header word 17 is 99", "reserved"}},
		{"truncated", good[:len(good)-3], ErrSize, []string{"truncated", "promises 3 tokens, 1030 bytes in all", "file has 1027 bytes (3 missing)", "forge prepare"}},
		{"trailing", append(bytes.Clone(good), 1, 2, 3, 4), ErrSize, []string{"4 unexpected bytes after the 3 tokens", "want 1030 bytes", "file has 1034", "forge prepare"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokens(tc.b)
			if err == nil {
				t.Fatalf("ParseTokens accepted it: %d tokens", len(got))
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %q is not %v", err, tc.kind)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FormatError", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "data: token data: ") {
				t.Errorf("error %q does not name its input", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
	if got, err := ParseTokens(good); err != nil || !slices.Equal(got, []uint16{10, 20, 30}) {
		t.Errorf("ParseTokens(good) = %v, %v", got, err)
	}
}

func TestReadTokensErrorsNameFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "val.bin")
	if err := os.WriteFile(path, tokenFile(TokenMagic, 1, 10, 1, 2), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadTokens(path)
	if err == nil || !strings.HasPrefix(err.Error(), "data: "+path+": truncated") || !errors.Is(err, ErrSize) {
		t.Errorf("ReadTokens(truncated) error = %v", err)
	}
	missing := filepath.Join(dir, "nope.bin")
	_, err = ReadTokens(missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") ||
		!strings.Contains(err.Error(), "forge prepare") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadTokens(missing) error = %v", err)
	}
}
