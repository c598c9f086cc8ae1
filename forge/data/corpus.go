package data

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
)

// DefaultCorpus names the built-in corpus used when a user gives none.
const DefaultCorpus = "austen"

//go:embed corpus/austen.txt.gz
var austenGz []byte

// austenText decompresses the embedded novels on first use and keeps them.
var austenText = sync.OnceValue(func() string {
	zr, err := gzip.NewReader(bytes.NewReader(austenGz))
	if err != nil {
		// The file is compiled into the binary: failing here means the
		// build itself is broken, not anything a caller can fix.
		panic("data: embedded corpus/austen.txt.gz is not gzip: " + err.Error())
	}
	var b strings.Builder
	b.Grow(austenSize)
	if _, err := io.Copy(&b, zr); err != nil {
		panic("data: embedded corpus/austen.txt.gz is corrupt: " + err.Error())
	}
	return b.String()
})

// austenSize is the length of the uncompressed text (see corpus/NOTICE.md).
const austenSize = 4025029

// Austen returns Jane Austen's six novels (Emma, Mansfield Park, Northanger
// Abbey, Persuasion, Pride and Prejudice, Sense and Sensibility) as one
// string of about 4 MB: public-domain text, ASCII apart from a single "£".
// The text is embedded compressed in the binary, decompressed on the first
// call and shared by later calls. corpus/NOTICE.md records its provenance
// and checksum.
func Austen() string { return austenText() }

// builtins maps each built-in corpus name to the function returning it.
var builtins = map[string]func() string{
	"austen": Austen,
}

// BuiltinNames returns the names Builtin accepts, sorted.
func BuiltinNames() []string {
	names := make([]string, 0, len(builtins))
	for name := range builtins {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Builtin returns the text of the built-in corpus called name (see
// BuiltinNames; DefaultCorpus is always present). An unknown name is an
// error that lists the names available.
func Builtin(name string) (string, error) {
	if f, ok := builtins[name]; ok {
		return f(), nil
	}
	return "", fmt.Errorf("data: no built-in corpus %q (available: %s)",
		name, strings.Join(BuiltinNames(), ", "))
}

// ReadTexts reads the text files paths for training, in order. An
// unreadable or empty file is an error naming it (an empty file would
// train on nothing from it without saying so).
func ReadTexts(paths []string) ([]string, error) {
	var texts []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%s is empty: give a text file with the training text", p)
		}
		texts = append(texts, string(b))
	}
	return texts, nil
}
