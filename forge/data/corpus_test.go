package data

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unsafe"
)

// The checksum and size recorded in corpus/NOTICE.md.
const (
	austenSHA256 = "65b434d16a8755142bfa95ba19c5f9abd0d30cf3dffe3b6793e834f9f56dcc96"
	austenBytes  = 4025029
)

func TestAustenChecksum(t *testing.T) {
	text := Austen()
	if len(text) != austenBytes {
		t.Fatalf("len(Austen()) = %d, want %d", len(text), austenBytes)
	}
	sum := sha256.Sum256([]byte(text))
	if got := hex.EncodeToString(sum[:]); got != austenSHA256 {
		t.Fatalf("sha256(Austen()) = %s, want %s", got, austenSHA256)
	}
	for _, title := range []string{"EMMA", "MANSFIELD PARK", "NORTHANGER ABBEY", "Persuasion", "PRIDE AND PREJUDICE", "SENSE AND SENSIBILITY"} {
		if !strings.Contains(text, title+"\n") {
			t.Errorf("Austen() lacks the title %q", title)
		}
	}
	// NOTICE.md: ASCII but for one pound sign.
	nonASCII := 0
	for i := 0; i < len(text); i++ {
		if text[i] >= 0x80 {
			nonASCII++
		}
	}
	if nonASCII != 2 || strings.Count(text, "£") != 1 {
		t.Errorf("Austen() has %d non-ASCII bytes and %d '£'; NOTICE.md says exactly one '£' (2 bytes)", nonASCII, strings.Count(text, "£"))
	}
}

func TestAustenCached(t *testing.T) {
	a, b := Austen(), Austen()
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("Austen() decompressed the corpus twice")
	}
}

func TestBuiltin(t *testing.T) {
	text, err := Builtin(DefaultCorpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(text) != austenBytes {
		t.Errorf("Builtin(%q) has %d bytes, want %d", DefaultCorpus, len(text), austenBytes)
	}
	_, err = Builtin("shakespeare")
	if err == nil {
		t.Fatal("Builtin(\"shakespeare\") succeeded")
	}
	for _, want := range []string{`"shakespeare"`, "available: austen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if names := BuiltinNames(); len(names) == 0 || names[0] != "austen" {
		t.Errorf("BuiltinNames() = %v", names)
	}
}
