package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sampleTensors covers every dtype, a scalar and zero-size tensors.
func sampleTensors() []Tensor {
	return []Tensor{
		F32("f32.matrix", []int{2, 3}, []float32{-1, -0.5, 0, 0.5, 1, float32(math.Inf(1))}),
		F64("f64.vec", []int{4}, []float64{1, 1.0 / 3, -0.0, math.MaxFloat64}),
		F16("f16.vec", []int{3}, []float32{0.5, -2, 65504}),
		BF16("bf16.mat", []int{2, 2}, []float32{1, -3, 0.25, 1e30}),
		I32("i32.ids", []int{5}, []int32{math.MinInt32, -1, 0, 1, math.MaxInt32}),
		I64("i64.big", []int{2}, []int64{math.MinInt64, math.MaxInt64}),
		U8("u8.bytes", []int{3}, []byte{0, 127, 255}),
		F32("scalar", nil, []float32{3.25}),
		F32("empty", []int{0, 4}, nil),
		{Name: "empty.i64", DType: DTypeI64, Shape: []int{3, 0, 2}, Data: []byte{}},
		{Name: "bool", DType: DTypeBool, Shape: []int{2}, Data: []byte{1, 0}},
		{Name: "i8", DType: DTypeI8, Shape: []int{1, 1, 3}, Data: []byte{0x80, 0xff, 0x7f}},
		{Name: "i16", DType: DTypeI16, Shape: []int{1}, Data: []byte{0x00, 0x80}},
		{Name: "u16", DType: DTypeU16, Shape: []int{1}, Data: []byte{0xff, 0xff}},
		{Name: "u32", DType: DTypeU32, Shape: []int{1}, Data: []byte{1, 2, 3, 4}},
		{Name: "u64", DType: DTypeU64, Shape: []int{1}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Name: "f8.e5m2", DType: DTypeF8E5M2, Shape: []int{2}, Data: []byte{0x3c, 0xbc}},
		{Name: "f8.e4m3", DType: DTypeF8E4M3, Shape: []int{1}, Data: []byte{0x38}},
	}
}

// diffTensors compares two tensor lists as sets keyed by name; "" means
// equal. Nil and empty shapes and data are equal.
func diffTensors(got, want []Tensor) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d tensors, want %d", len(got), len(want))
	}
	byName := map[string]Tensor{}
	for _, t := range got {
		byName[t.Name] = t
	}
	for _, w := range want {
		g, ok := byName[w.Name]
		switch {
		case !ok:
			return fmt.Sprintf("tensor %q missing", w.Name)
		case g.DType != w.DType:
			return fmt.Sprintf("tensor %q: dtype %s, want %s", w.Name, g.DType, w.DType)
		case !slices.Equal(g.Shape, w.Shape):
			return fmt.Sprintf("tensor %q: shape %v, want %v", w.Name, g.Shape, w.Shape)
		case !bytes.Equal(g.Data, w.Data):
			return fmt.Sprintf("tensor %q: data %x, want %x", w.Name, g.Data, w.Data)
		}
	}
	return ""
}

func mustMarshal(t testing.TB, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	b, err := Marshal(tensors, meta)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return b
}

// rawFile assembles a file from a header and a data buffer, unpadded.
func rawFile(header string, buf []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, buf...)
}

// headerOf decodes the header of b with encoding/json (an independent
// reader) for layout checks.
func headerOf(t *testing.T, b []byte) (int, map[string]json.RawMessage) {
	t.Helper()
	n := int(binary.LittleEndian.Uint64(b))
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatalf("header: %v", err)
	}
	return n, h
}

func TestRoundTrip(t *testing.T) {
	want := sampleTensors()
	b := mustMarshal(t, want, nil)
	f, err := Unmarshal(b)
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if d := diffTensors(f.Tensors, want); d != "" {
		t.Fatal(d)
	}

	// Layout: header padded to 8 bytes; tensors in file order, back to
	// back, each aligned to its element size from the start of the file.
	n, h := headerOf(t, b)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	pos := 0
	for _, tn := range f.Tensors {
		var e struct {
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(h[tn.Name], &e); err != nil {
			t.Fatal(err)
		}
		if e.Offsets[0] != pos {
			t.Errorf("tensor %q begins at %d, want %d (file order)", tn.Name, e.Offsets[0], pos)
		}
		if (8+n+e.Offsets[0])%tn.DType.Size() != 0 {
			t.Errorf("tensor %q at file offset %d is not aligned to %d", tn.Name, 8+n+e.Offsets[0], tn.DType.Size())
		}
		pos = e.Offsets[1]
	}

	// Scalars and zero-size tensors.
	s, ok := f.Get("scalar")
	if !ok || len(s.Shape) != 0 || s.Shape == nil {
		t.Errorf("scalar: %+v, %v; want shape [] (non-nil)", s, ok)
	}
	if v, err := s.Float32s(); err != nil || !slices.Equal(v, []float32{3.25}) {
		t.Errorf("scalar values %v, %v", v, err)
	}
	e, _ := f.Get("empty.i64")
	if v, err := e.Int64s(); err != nil || len(v) != 0 {
		t.Errorf("empty values %v, %v", v, err)
	}
	if _, ok := f.Get("nope"); ok {
		t.Error("Get found a missing tensor")
	}

	// An empty file: no tensors, no metadata.
	b = mustMarshal(t, nil, nil)
	if want := "\x08\x00\x00\x00\x00\x00\x00\x00{}      "; string(b) != want {
		t.Errorf("empty file %q, want %q", b, want)
	}
	if f, err := Unmarshal(b); err != nil || len(f.Tensors) != 0 || f.Metadata == nil {
		t.Errorf("empty file: %+v, %v", f, err)
	}
}

func TestUnmarshalDataAliasing(t *testing.T) {
	b := mustMarshal(t, []Tensor{U8("a", []int{2}, []byte{1, 2}), U8("b", []int{2}, []byte{3, 4})}, nil)
	f, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Get("a")
	if cap(a.Data) != 2 {
		t.Errorf("cap(Data) = %d, want 2 (appending must not clobber the next tensor)", cap(a.Data))
	}
	a.Data = append(a.Data, 9)
	if bb, _ := f.Get("b"); !bytes.Equal(bb.Data, []byte{3, 4}) {
		t.Errorf("append to one tensor changed another: %v", bb.Data)
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	meta := map[string]string{
		"format":  "pt",
		"quote":   `say "hi" \ bye`,
		"unicode": "héllo → wörld ✓",
		"control": "tab\there\nnl\x01\x1f\b\f\r",
		"":        "empty key",
		"empty":   "",
		"html":    "<a & b>",
	}
	b := mustMarshal(t, []Tensor{F32("w", []int{1}, []float32{1})}, meta)
	f, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(f.Metadata, meta) {
		t.Errorf("metadata %q, want %q", f.Metadata, meta)
	}
	// An independent JSON decoder reads the same map.
	_, h := headerOf(t, b)
	var m map[string]string
	if err := json.Unmarshal(h[metadataKey], &m); err != nil || !mapsEqual(m, meta) {
		t.Errorf("encoding/json reads %q, %v", m, err)
	}
	if !bytes.Contains(b, []byte("<a & b>")) {
		t.Error("HTML characters were escaped; the header should keep them as is")
	}

	// No metadata: the key is omitted, nil and empty encode alike, and
	// Unmarshal returns an empty, non-nil map.
	b1 := mustMarshal(t, nil, nil)
	b2 := mustMarshal(t, nil, map[string]string{})
	if !bytes.Equal(b1, b2) || bytes.Contains(b1, []byte(metadataKey)) {
		t.Errorf("empty metadata encodes as %q and %q", b1, b2)
	}
	for _, hdr := range []string{`{}`, `{"__metadata__":{}}`, `{"__metadata__":null}`} {
		f, err := Unmarshal(rawFile(hdr, nil))
		if err != nil || f.Metadata == nil || len(f.Metadata) != 0 {
			t.Errorf("%s: metadata %#v, %v", hdr, f, err)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestDeterministic(t *testing.T) {
	tensors := sampleTensors()
	meta := map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}
	want := mustMarshal(t, tensors, meta)
	for i := range 20 {
		shuffled := slices.Clone(tensors)
		// A deterministic permutation per round.
		for j := range shuffled {
			k := (j*7 + i*13) % len(shuffled)
			shuffled[j], shuffled[k] = shuffled[k], shuffled[j]
		}
		m := map[string]string{}
		for _, k := range []string{"d", "b", "a", "c"} {
			m[k] = meta[k]
		}
		if got := mustMarshal(t, shuffled, m); !bytes.Equal(got, want) {
			t.Fatalf("round %d: output depends on input order", i)
		}
	}
	var w bytes.Buffer
	if err := Write(&w, tensors, meta); err != nil || !bytes.Equal(w.Bytes(), want) {
		t.Errorf("Write differs from Marshal (err %v)", err)
	}
	if err := Write(failingWriter{}, tensors, meta); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Write to a failing writer: %v", err)
	}

	// The exact bytes of a small file: largest elements first, then by
	// name; metadata first and sorted; compact JSON padded with spaces.
	got := mustMarshal(t, []Tensor{
		U8("b", []int{1}, []byte{7}),
		F32("c", []int{2}, []float32{1, 2}),
		F32("a", nil, []float32{-1}),
	}, map[string]string{"z": "1", "k": "2"})
	header := `{"__metadata__":{"k":"2","z":"1"},` +
		`"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},` +
		`"c":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},` +
		`"b":{"dtype":"U8","shape":[1],"data_offsets":[12,13]}}`
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	buf := []byte{0, 0, 0x80, 0xbf, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 7}
	if wantB := rawFile(header, buf); !bytes.Equal(got, wantB) {
		t.Errorf("got\n%q\nwant\n%q", got, wantB)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestMarshalErrors(t *testing.T) {
	ok := F32("ok", []int{1}, []float32{1})
	cases := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"empty name", []Tensor{ok, F32("", []int{1}, []float32{1})}, nil, "tensor 1 (of 2) has an empty name"},
		{"duplicate", []Tensor{ok, ok}, nil, `two tensors are named "ok"`},
		{"reserved", []Tensor{F32(metadataKey, nil, []float32{1})}, nil, "reserves for the metadata"},
		{"bad utf8 name", []Tensor{F32("a\xff", nil, []float32{1})}, nil, "not valid UTF-8"},
		{"unknown dtype", []Tensor{{Name: "x", DType: "F128", Shape: []int{1}, Data: make([]byte, 16)}}, nil, `tensor "x": unknown dtype "F128"`},
		{"negative dim", []Tensor{{Name: "x", DType: DTypeU8, Shape: []int{-1}}}, nil, "negative dimension"},
		{"too short", []Tensor{F32("x", []int{2, 3}, make([]float32, 5))}, nil, `tensor "x": shape [2 3] with dtype F32 needs 24 bytes of data but Data has 20`},
		{"too long", []Tensor{F32("x", nil, make([]float32, 2))}, nil, "needs 4 bytes of data but Data has 8"},
		{"rank", []Tensor{{Name: "x", DType: DTypeU8, Shape: make([]int, MaxRank+1)}}, nil, "more than the limit of 64"},
		{"overflow", []Tensor{{Name: "x", DType: DTypeF64, Shape: []int{1 << 31, 1 << 31, 1 << 31}}}, nil, "overflows"},
		{"bad utf8 metadata", nil, map[string]string{"k": "\xc3"}, "not valid UTF-8"},
	}
	for _, c := range cases {
		_, err := Marshal(c.tensors, c.meta)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "safetensors: ") {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if err := Write(new(bytes.Buffer), c.tensors, c.meta); err == nil {
			t.Errorf("%s: Write accepted it", c.name)
		}
	}
}

// entryJSON is a valid F32 entry of n elements at [begin, begin+4n).
func entryJSON(n, begin int) string {
	return fmt.Sprintf(`{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}`, n, begin, begin+4*n)
}

func TestUnmarshalErrors(t *testing.T) {
	buf8 := make([]byte, 8)
	tooLong := binary.LittleEndian.AppendUint64(nil, math.MaxInt64)
	tooLong = append(tooLong, make([]byte, 1016)...)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "file is 0 bytes, shorter than the 8-byte header-length prefix"},
		{"short file", []byte{1, 2, 3, 4, 5}, "file is 5 bytes"},
		{"header length beyond file", tooLong, "header length 9223372036854775807 exceeds the 1016 bytes that follow the length prefix (file size 1024): the file is truncated"},
		{"header truncated", rawFile(`{"a":`+entryJSON(2, 0)+`}`, buf8)[:30], "header length 54 exceeds the 22 bytes"},
		{"zero header", rawFile("", nil), "header length is 0"},
		{"not utf8", rawFile("{\"a\xff\":1}", nil), "not valid UTF-8"},
		{"not an object", rawFile(`[1,2]`, nil), `header starts with "[1,2]", not '{'`},
		{"leading space", rawFile(` {}`, nil), `header starts with " {}"`},
		{"NUL padding", rawFile("{}\x00\x00", nil), "not valid JSON"},
		{"invalid json", rawFile(`{"a":`, nil), "header is not valid JSON"},
		{"trailing garbage", rawFile(`{} x`, nil), "not valid JSON"},
		{"two objects", rawFile(`{}{}`, nil), "not valid JSON"},
		{"trailing comma", rawFile(`{"__metadata__":{},}`, nil), "not valid JSON"},
		{"entry not object", rawFile(`{"a":1}`, nil), `tensor "a": entry is the number 1, want an object`},
		{"entry array", rawFile(`{"a":[]}`, nil), `tensor "a": entry is an array`},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, buf8[:4]), `tensor "a": missing "dtype"`},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, buf8[:4]), `tensor "a": missing "shape"`},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, buf8[:4]), `tensor "a": missing "data_offsets"`},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, make([]byte, 16)), `tensor "a": unknown dtype "F128" (supported: F64, `},
		{"lowercase dtype", rawFile(`{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, buf8[:4]), `unknown dtype "f32"`},
		{"dtype not string", rawFile(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, buf8[:4]), "dtype is the number 4, want a string"},
		{"unknown field", rawFile(`{"a":{"dtype":"F32","shape":[1],"offsets":[0,4]}}`, buf8[:4]), `unknown field "offsets"`},
		{"duplicate field", rawFile(`{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, buf8[:4]), `field "dtype" appears twice`},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, nil), "shape contains the negative value -1"},
		{"fractional dim", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, buf8[:4]), "shape contains 1.5, which is not written as an integer"},
		{"exponent dim", rawFile(`{"a":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}}`, buf8[:4]), "not written as an integer"},
		{"huge dim", rawFile(`{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}}`, buf8[:4]), "shape contains 99999999999999999999, which overflows an int"},
		{"dim string", rawFile(`{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, buf8[:4]), "shape contains a string, want only integers"},
		{"shape not array", rawFile(`{"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}}`, buf8[:4]), "shape is the number 1, want an array"},
		{"shape overflow", rawFile(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}}`, buf8[:4]), "overflows an int"},
		{"rank", rawFile(`{"a":{"dtype":"F32","shape":[`+strings.TrimSuffix(strings.Repeat("1,", 65), ",")+`],"data_offsets":[0,4]}}`, buf8[:4]), "shape has more than 64 dimensions"},
		{"offsets one value", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, buf8[:4]), "data_offsets has 1 values, want two"},
		{"offsets three values", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, buf8[:4]), "data_offsets has more than 2 values"},
		{"offsets not array", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":"0-4"}}`, buf8[:4]), "data_offsets is a string"},
		{"offsets negative", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, buf8[:4]), "data_offsets contains the negative value -4"},
		{"offsets reversed", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, buf8[:4]), "data_offsets [4, 0] end before they begin"},
		{"offsets past buffer", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, buf8[:4]), `tensor "a": data_offsets [0, 8] reach past the end of the 4-byte data buffer: the file is truncated`},
		{"byte length", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, buf8[:4]), `tensor "a": shape [2] of F32 needs 8 bytes but data_offsets [0, 4] span 4`},
		{"overlap", rawFile(`{"a":`+entryJSON(2, 0)+`,"b":`+entryJSON(2, 4)+`}`, make([]byte, 12)), `tensors "a" (bytes [0, 8)) and "b" (bytes [4, 12)) overlap`},
		{"same range", rawFile(`{"a":`+entryJSON(1, 0)+`,"b":`+entryJSON(1, 0)+`}`, buf8[:4]), "overlap"},
		{"empty inside another", rawFile(`{"a":`+entryJSON(2, 0)+`,"b":`+entryJSON(0, 4)+`}`, buf8), `"b" (bytes [4, 4)) overlap`},
		{"gap", rawFile(`{"a":`+entryJSON(1, 0)+`,"b":`+entryJSON(1, 8)+`}`, make([]byte, 12)), `data buffer bytes [4, 8) belong to no tensor (a gap before tensor "b")`},
		{"gap at start", rawFile(`{"a":`+entryJSON(1, 4)+`}`, buf8), "data buffer bytes [0, 4) belong to no tensor"},
		{"trailing bytes", rawFile(`{"a":`+entryJSON(1, 0)+`}`, buf8), "the data buffer is 8 bytes but the tensors cover only the first 4"},
		{"data without tensors", rawFile(`{}`, buf8[:1]), "the data buffer is 1 bytes but the tensors cover only the first 0"},
		{"metadata value number", rawFile(`{"__metadata__":{"k":1}}`, nil), `"__metadata__" entry "k" is the number 1; metadata values must be strings`},
		{"metadata value object", rawFile(`{"__metadata__":{"k":{"x":"y"}}}`, nil), `entry "k" is an object`},
		{"metadata not object", rawFile(`{"__metadata__":["a"]}`, nil), `"__metadata__" is an array; it must be an object`},
		{"metadata string", rawFile(`{"__metadata__":"x"}`, nil), `"__metadata__" is a string`},
		{"duplicate tensor", rawFile(`{"a":`+entryJSON(1, 0)+`,"a":`+entryJSON(1, 0)+`}`, buf8[:4]), `header has the key "a" twice`},
		{"duplicate escaped", rawFile(`{"a":`+entryJSON(1, 0)+`,"\u0061":`+entryJSON(1, 4)+`}`, buf8), `header has the key "a" twice`},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), `header has the key "__metadata__" twice`},
		{"duplicate metadata key", rawFile(`{"__metadata__":{"k":"1","k":"2"}}`, nil), `"__metadata__" has the key "k" twice`},
		{"empty name", rawFile(`{"":`+entryJSON(1, 0)+`}`, buf8[:4]), `a tensor has the empty name ""`},
	}
	for _, c := range cases {
		f, err := Unmarshal(c.file)
		if err == nil {
			t.Errorf("%s: accepted: %+v", c.name, f)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant it to contain %q", c.name, err, c.want)
		}
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), "safetensors: ") {
			t.Errorf("%s: error %T %q is not a *FormatError with the package prefix", c.name, err, err)
		}
	}
}

func TestHeaderLimit(t *testing.T) {
	// headerBounds rejects a header above MaxHeaderSize even when the file
	// is large enough to hold it.
	msg := headerBounds(MaxHeaderSize+1, 1<<40)
	if !strings.Contains(msg, "header length 100000001 exceeds the 100000000-byte limit") {
		t.Errorf("got %q", msg)
	}
	if msg := headerBounds(MaxHeaderSize, MaxHeaderSize+8); msg != "" {
		t.Errorf("a header of exactly MaxHeaderSize is rejected: %s", msg)
	}

	// ReadFile checks the prefix before loading a (here sparse) 200 MB file.
	path := filepath.Join(t.TempDir(), "big.safetensors")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(binary.LittleEndian.AppendUint64(nil, 150_000_000)); err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(200_000_000); err != nil {
		t.Skipf("cannot make a sparse file: %v", err)
	}
	fh.Close()
	_, err = ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), path+": header length 150000000 exceeds the 100000000-byte limit") {
		t.Errorf("got %v", err)
	}
}

func TestUnmarshalAccepts(t *testing.T) {
	data := []byte{0, 0, 0x80, 0x3f, 7, 8}
	want := []Tensor{F32("w", []int{1}, []float32{1}), U8("b", []int{2}, []byte{7, 8}), F32("e", []int{0}, nil)}
	for _, hdr := range []string{
		// Unpadded, as older writers produced.
		`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"e":{"dtype":"F32","shape":[0],"data_offsets":[6,6]}}`,
		// Spaces everywhere, fields and keys in another order, long padding.
		"{ \"__metadata__\" : { \"k\" : \"v\" } ,\n \"e\": {\"shape\": [0], \"data_offsets\": [0, 0], \"dtype\": \"F32\"},\n" +
			" \"b\": {\"data_offsets\": [4, 6], \"dtype\": \"U8\", \"shape\": [2]},\t\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4], \"shape\": [1]} }                 ",
	} {
		f, err := Unmarshal(rawFile(hdr, data))
		if err != nil {
			t.Errorf("%s: %v", hdr, err)
			continue
		}
		if d := diffTensors(f.Tensors, want); d != "" {
			t.Errorf("%s: %s", hdr, d)
		}
		var names []string
		for _, tn := range f.Tensors {
			names = append(names, tn.Name)
		}
		if !slices.Equal(names, []string{"w", "b", "e"}) && !slices.Equal(names, []string{"e", "w", "b"}) {
			t.Errorf("tensors not in file order: %v", names)
		}
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.safetensors")
	if _, err := ReadFile(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	for name, content := range map[string][]byte{
		"short.safetensors":     {1, 2, 3},
		"truncated.safetensors": mustMarshal(t, sampleTensors(), nil)[:200],
		"corrupt.safetensors":   rawFile(`{"a":1}`, nil),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFile(path)
		var fe *FormatError
		if err == nil || !strings.HasPrefix(err.Error(), "safetensors: "+path+": ") || !errors.As(err, &fe) || fe.Path != path {
			t.Errorf("%s: error %v does not name the file", name, err)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	tensors := sampleTensors()
	meta := map[string]string{"step": "10"}
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTensors(f.Tensors, tensors); d != "" || f.Metadata["step"] != "10" {
		t.Fatalf("%s; metadata %v", d, f.Metadata)
	}
	onDisk, _ := os.ReadFile(path)
	if !bytes.Equal(onDisk, mustMarshal(t, tensors, meta)) {
		t.Error("WriteFile and Marshal differ")
	}

	// Replacing keeps the old permission bits.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, tensors[:2], nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after replace: %v, %v", fi.Mode(), err)
	}
	before, _ := os.ReadFile(path)

	// A failed write leaves the existing file as it was and no temporary
	// file behind.
	bad := append(slices.Clone(tensors), F32("bad", []int{2}, []float32{1}))
	err = WriteFile(path, bad, nil)
	if err == nil || !strings.Contains(err.Error(), "writing "+path+`: tensor "bad"`) {
		t.Errorf("invalid tensor: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Error("a failed WriteFile changed the existing file")
	}
	checkOnly(t, dir, "model.safetensors")

	// A failure after the temporary file exists (the target is a
	// non-empty directory, so the rename fails) also cleans up.
	target := filepath.Join(dir, "dir.safetensors")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, tensors, nil); err == nil || !strings.Contains(err.Error(), "rename") {
		t.Errorf("rename over a directory: %v", err)
	}
	checkOnly(t, dir, "dir.safetensors", "model.safetensors")

	// A directory that does not exist.
	if err := WriteFile(filepath.Join(dir, "no", "such.safetensors"), tensors, nil); err == nil {
		t.Error("wrote into a missing directory")
	}
}

// checkOnly fails unless dir holds exactly the named entries.
func checkOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, names) {
		t.Errorf("directory holds %v, want %v (temporary files left behind?)", got, names)
	}
}

func TestConversions(t *testing.T) {
	f32 := F32("x", []int{2}, []float32{1.5, -2})
	if v, err := f32.Float32s(); err != nil || !slices.Equal(v, []float32{1.5, -2}) {
		t.Errorf("Float32s: %v, %v", v, err)
	}
	if v, err := f32.Float64s(); err != nil || !slices.Equal(v, []float64{1.5, -2}) {
		t.Errorf("Float64s: %v, %v", v, err)
	}
	h := F16("h", []int{3}, []float32{0.1, 1, -65504})
	if v, err := h.Float32s(); err != nil || !slices.Equal(v, []float32{0.0999755859375, 1, -65504}) {
		t.Errorf("F16 Float32s: %v, %v", v, err)
	}
	bf := BF16("b", []int{2}, []float32{0.1, 3})
	if v, err := bf.Float64s(); err != nil || !slices.Equal(v, []float64{0.10009765625, 3}) {
		t.Errorf("BF16 Float64s: %v, %v", v, err)
	}
	i32 := I32("i", []int{2}, []int32{-7, 9})
	if v, err := i32.Int32s(); err != nil || !slices.Equal(v, []int32{-7, 9}) {
		t.Errorf("Int32s: %v, %v", v, err)
	}
	if v, err := i32.Int64s(); err != nil || !slices.Equal(v, []int64{-7, 9}) {
		t.Errorf("Int64s: %v, %v", v, err)
	}
	narrow := []Tensor{
		{Name: "i8", DType: DTypeI8, Shape: []int{2}, Data: []byte{0xff, 0x7f}},
		{Name: "u16", DType: DTypeU16, Shape: []int{1}, Data: []byte{0xff, 0xff}},
		{Name: "i16", DType: DTypeI16, Shape: []int{1}, Data: []byte{0xff, 0xff}},
		{Name: "u32", DType: DTypeU32, Shape: []int{1}, Data: []byte{0xff, 0xff, 0xff, 0xff}},
	}
	wants := [][]int64{{-1, 127}, {65535}, {-1}, {4294967295}}
	for i, tn := range narrow {
		if v, err := tn.Int64s(); err != nil || !slices.Equal(v, wants[i]) {
			t.Errorf("%s Int64s: %v, %v", tn.Name, v, err)
		}
	}
	if v, err := U8("u", []int{2}, []byte{200, 1}).Int32s(); err != nil || !slices.Equal(v, []int32{200, 1}) {
		t.Errorf("U8 Int32s: %v, %v", v, err)
	}
	if v, err := F64("d", []int{2}, []float64{0.1, -1e300}).Float64s(); err != nil || !slices.Equal(v, []float64{0.1, -1e300}) {
		t.Errorf("F64 Float64s: %v, %v", v, err)
	}
	if v, err := I64("big", nil, []int64{math.MaxInt64}).Int64s(); err != nil || v[0] != math.MaxInt64 {
		t.Errorf("I64 Int64s: %v, %v", v, err)
	}

	for _, c := range []struct {
		err  error
		want string
	}{
		{second(F64("d", []int{1}, []float64{1}).Float32s()), `tensor "d": Float32s reads F32, F16 and BF16 tensors, not F64 (narrowing F64 would lose precision: use Float64s)`},
		{second(i32.Float32s()), "not I32"},
		{second(i32.Float64s()), "not I32"},
		{second(f32.Int32s()), "Int32s reads"},
		{second(I64("l", []int{1}, []int64{1}).Int32s()), "not I64"},
		{second((&Tensor{Name: "u", DType: DTypeU64, Shape: []int{1}, Data: make([]byte, 8)}).Int64s()), "not U64"},
		{second(F32("s", []int{3}, []float32{1}).Float32s()), `tensor "s": shape [3] with dtype F32 needs 12 bytes of data but Data has 4`},
		{second(I32("s", []int{2}, []int32{1}).Int64s()), "needs 8 bytes"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", c.err, c.want)
		}
	}

	// Constructors copy their inputs.
	shape := []int{2}
	vals := []byte{1, 2}
	u := U8("u", shape, vals)
	shape[0], vals[0] = 5, 9
	if u.Shape[0] != 2 || u.Data[0] != 1 {
		t.Error("a constructor kept a reference to its arguments")
	}
}

func second[T any](_ T, err error) error { return err }

func TestF16Conversion(t *testing.T) {
	// Every half widens exactly and narrows back to itself.
	for h := range 1 << 16 {
		f := f16ToFloat32(uint16(h))
		got := float32ToF16(f)
		if f != f {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x8000 != uint16(h)&0x8000 {
				t.Fatalf("NaN %#04x -> %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
	// Values between neighbouring halves round to the nearer one, ties to
	// the even one. Midpoints of halves are exact in float32.
	for h := uint16(0); h < 0x7c00; h++ {
		lo, hi := float64(f16ToFloat32(h)), float64(f16ToFloat32(h+1))
		if h+1 == 0x7c00 {
			hi = 65536 // the next binade's first value, where infinity begins
		}
		mid := float32((lo + hi) / 2)
		even := h
		if h&1 == 1 {
			even = h + 1
		}
		for _, c := range []struct {
			in   float32
			want uint16
		}{
			{mid, even},
			{math.Nextafter32(mid, 0), h},
			{math.Nextafter32(mid, float32(math.Inf(1))), h + 1},
		} {
			if got := float32ToF16(c.in); got != c.want {
				t.Fatalf("%v (between %#04x and %#04x) -> %#04x, want %#04x", c.in, h, h+1, got, c.want)
			}
			if got := float32ToF16(-c.in); got != c.want|0x8000 {
				t.Fatalf("%v -> %#04x, want %#04x", -c.in, got, c.want|0x8000)
			}
		}
	}
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{float32(math.Inf(1)), 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{1e10, 0x7c00},
		{math.MaxFloat32, 0x7c00},
		{1e-30, 0},
		{-1e-30, 0x8000},
		{math.SmallestNonzeroFloat32, 0},
	} {
		if got := float32ToF16(c.in); got != c.want {
			t.Errorf("%v -> %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if h := float32ToF16(math.Float32frombits(0x7f800001)); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN with a low payload -> %#04x, not a NaN", h)
	}
}

func TestBF16Conversion(t *testing.T) {
	for h := range 1 << 16 {
		f := bf16ToFloat32(uint16(h))
		got := float32ToBF16(f)
		if f != f {
			if got&0x7f80 != 0x7f80 || got&0x7f == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
	for _, c := range []struct {
		bits uint32
		want uint16
	}{
		{0x3f808000, 0x3f80}, // tie, even below
		{0x3f818000, 0x3f82}, // tie, even above
		{0x3f808001, 0x3f81},
		{0x3f807fff, 0x3f80},
		{0x7f7fffff, 0x7f80}, // largest float32 rounds to infinity
		{0x7f800001, 0x7fc0}, // NaN with a low payload stays NaN
		{0x80000001, 0x8000}, // smallest negative subnormal
	} {
		if got := float32ToBF16(math.Float32frombits(c.bits)); got != c.want {
			t.Errorf("%#08x -> %#04x, want %#04x", c.bits, got, c.want)
		}
	}
}

// compatTensors is what TestPythonCompat writes for
// tests/safetensors_check.py; the fixed tensors and the metadata are
// repeated there as GO_EXPECTED and GO_METADATA.
func compatTensors() ([]Tensor, map[string]string) {
	src := []float32{
		0, float32(math.Copysign(0, -1)), 1, 1.0 / 3, -2.5, 0.1, 1000.5,
		65504, 65519, 65520, -65520, 2049, 2051, // F16: largest, just below/at overflow, ties
		1e-8, 3e-8, -3e-8, 5.96e-8, 2.98e-8, 6.1e-5, // F16 subnormals and underflow
		1 + 0x1p-11, 1 + 3*0x1p-11, 1 + 0x1p-8, 1 + 3*0x1p-8, // ties in F16 and BF16
		1e30, -1e-40, math.MaxFloat32, -math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		src = append(src,
			math.Float32frombits(r.Uint32()),             // any bit pattern
			float32(r.NormFloat64()*3e4),                 // around the F16 range
			float32(r.NormFloat64()*1e-6),                // F16 subnormals
			float32(r.Float64()*4)+float32(r.IntN(3000)), // fine fractions
		)
	}
	n := []int{len(src)}
	return []Tensor{
			F32("f32.matrix", []int{2, 3}, []float32{-1, -0.5, 0, 0.5, 1, 1.5}),
			F64("f64.vector", []int{4}, []float64{1, 1.0 / 2, 1.0 / 3, 1.0 / 4}),
			I32("i32.ids", []int{5}, []int32{math.MinInt32, -1, 0, 1, math.MaxInt32}),
			I64("i64.big", []int{2}, []int64{-(1 << 62), 1<<62 + 1}),
			U8("u8.bytes", []int{3}, []byte{0, 127, 255}),
			{Name: "bool.mask", DType: DTypeBool, Shape: []int{2, 2}, Data: []byte{1, 0, 0, 1}},
			F32("scalar", nil, []float32{3.25}),
			F32("empty", []int{0, 4}, nil),
			F32("f32.round_src", n, src),
			F16("f16.round", n, src),
			BF16("bf16.round", n, src),
		}, map[string]string{
			"format":   "pt",
			"producer": `forge "go" test`,
			"unicode":  "héllo → wörld",
			"control":  "tab\there\nnext\x01",
		}
}

// pythonTensors is what tests/safetensors_check.py writes (PY_TENSORS and
// PY_METADATA there), in buffer order.
func pythonTensors() ([]Tensor, map[string]string) {
	return []Tensor{
		U8("z.first", []int{3}, []byte{1, 2, 3}),
		F32("b.f32", []int{2, 2}, []float32{1.5, -2, 0.001, 7}),
		I64("a.i64", nil, []int64{-5}),
		F16("m.f16", []int{2}, []float32{0.5, -65504}),
		BF16("m.bf16", []int{2}, []float32{1, -3}),
		I32("e.empty", []int{2, 0}, nil),
		F64("d.f64", []int{3}, []float64{math.Pi, math.Copysign(0, -1), 1e300}),
		{Name: "c.bool", DType: DTypeBool, Shape: []int{4}, Data: []byte{1, 0, 0, 1}},
	}, map[string]string{"source": "python", "note": "written by tests/safetensors_check.py"}
}

// TestPythonCompat checks the format against an independent reader and
// writer (tests/safetensors_check.py, Python standard library only, plus
// torch when it imports; -short skips the torch part).
func TestPythonCompat(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("skipping the Python cross-check: %s is not available (%v)", python, err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "tests", "safetensors_check.py"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go.safetensors")
	pyFile := filepath.Join(dir, "py.safetensors")
	tensors, meta := compatTensors()
	if err := WriteFile(goFile, tensors, meta); err != nil {
		t.Fatal(err)
	}
	args := []string{script, goFile, pyFile}
	if testing.Short() {
		args = append(args, "--no-torch")
	}
	out, err := exec.Command(python, args...).CombinedOutput()
	t.Logf("%s %s:\n%s", python, strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("the Python check failed: %v", err)
	}

	f, err := ReadFile(pyFile)
	if err != nil {
		t.Fatal(err)
	}
	want, wantMeta := pythonTensors()
	if d := diffTensors(f.Tensors, want); d != "" {
		t.Errorf("file written by Python: %s", d)
	}
	for i, tn := range f.Tensors {
		if tn.Name != want[i].Name {
			t.Errorf("tensor %d is %q, want %q (file order)", i, tn.Name, want[i].Name)
		}
	}
	if !mapsEqual(f.Metadata, wantMeta) {
		t.Errorf("metadata %q, want %q", f.Metadata, wantMeta)
	}
}

func FuzzUnmarshal(f *testing.F) {
	tensors, meta := compatTensors()
	small := []Tensor{F32("a", nil, []float32{1}), U8("b", []int{3}, []byte{1, 2, 3}), I64("c", []int{0, 2}, nil)}
	seeds := [][]byte{
		mustMarshal(f, sampleTensors(), map[string]string{"k": "v"}),
		mustMarshal(f, tensors[:8], meta),
		mustMarshal(f, small, nil),
		mustMarshal(f, nil, nil),
		rawFile(`{"b":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}, "a" : {"shape":[],"dtype":"F32","data_offsets":[3,7]},"__metadata__":null}`, make([]byte, 7)),
		rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)),
		rawFile(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, nil),
	}
	for _, b := range seeds {
		f.Add(b)
		for _, n := range []int{0, 7, 8, 9, len(b) / 2, len(b) - 1} {
			if n >= 0 && n < len(b) {
				f.Add(b[:n])
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := slices.Clone(b)
		file, err := Unmarshal(b)
		if !bytes.Equal(b, orig) {
			t.Fatal("Unmarshal modified its input")
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is a %T, not a *FormatError", err, err)
			}
			return
		}
		// Whatever Unmarshal accepts, Marshal can write, and the result
		// reads back as the same tensors and metadata, in canonical form.
		out, err := Marshal(file.Tensors, file.Metadata)
		if err != nil {
			t.Fatalf("Marshal rejects what Unmarshal accepted: %v", err)
		}
		again, err := Unmarshal(out)
		if err != nil {
			t.Fatalf("Unmarshal rejects what Marshal wrote: %v", err)
		}
		if d := diffTensors(again.Tensors, file.Tensors); d != "" {
			t.Fatal(d)
		}
		if !mapsEqual(again.Metadata, file.Metadata) {
			t.Fatalf("metadata %q, want %q", again.Metadata, file.Metadata)
		}
		if out2 := mustMarshal(t, again.Tensors, again.Metadata); !bytes.Equal(out2, out) {
			t.Fatal("Marshal is not stable across a round trip")
		}
	})
}
