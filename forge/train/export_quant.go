package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/forge/tokenizer"
)

// QuantFormat names the layout ExportQuantized writes (model.safetensors'
// metadata "format", with "version").
const (
	QuantFormat        = "forge-quant"
	quantFormatVersion = 1
)

// ExportQuantized writes m with the weights of the blocks' linear layers
// quantised under mode (int8 or ternary; "" means m.Config.Quant), so that
// LoadQuantized rebuilds the fake-quantised model exactly. dir receives:
//
//	model.safetensors     for each quantised weight W (out, in), named as
//	                      in gpt.Model.Params without ".weight":
//	                        <name>.qweight  int8: I8 (out, in), the levels r
//	                                        ternary: U8 (out, ⌈in/4⌉), r+1 ∈ {0,1,2}
//	                                        packed four to a byte, element j of
//	                                        a row in bits 2·(j mod 4) of byte j/4
//	                        <name>.scale    F32: int8 (out, 1), ternary (1)
//	                      W = r·scale (a float32 product, row-broadcast);
//	                      every other parameter F32 under its own name;
//	                      metadata format forge-quant, version, quant
//	config.json           the model's gpt.Config
//	forge-tokenizer.json  the tokenizer (when tok is not nil)
//	README.md             this layout, for readers other than Forge
//
// The levels are forge.Quantize's of the weight the model multiplies
// (Weight ⊙ Mask when pruned), so pruned entries are level 0. The
// embedding (also the tied head), an untied head and the norms are float32.
func ExportQuantized(m *gpt.Model, tok tokenizer.Tokenizer, dir, mode string) error {
	if mode == "" {
		mode = m.Config.Quant
	}
	if mode != forge.QuantInt8 && mode != forge.QuantTernary {
		return fmt.Errorf("train: export: quant %q: a quantised export needs int8 or ternary (the run trains with quant %q; pass the mode to quantise after training)", mode, m.Config.Quant)
	}
	var ts []safetensors.Tensor
	err := forge.Try(func() {
		quant := map[*forge.Tensor]nn.NamedLinear{}
		for _, l := range m.BlockLinears() {
			quant[l.Layer.Weight] = l
		}
		for _, p := range m.Params() {
			l, ok := quant[p.Tensor]
			if !ok {
				ts = append(ts, f32(p.Name, p.Tensor))
				continue
			}
			ts = append(ts, quantTensors(l.Name, l.Layer.EffectiveMaskedWeight(), mode)...)
		}
	})
	if err != nil {
		return err
	}
	tmp, err := prepareExportDir(dir)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	meta := map[string]string{"format": QuantFormat, "version": fmt.Sprint(quantFormatVersion), "quant": mode}
	if err := safetensors.WriteFile(filepath.Join(tmp, modelFile), ts, meta); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(tmp, "config.json"), m.Config); err != nil {
		return err
	}
	if tok != nil {
		if err := tok.Save(filepath.Join(tmp, "forge-tokenizer.json")); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(filepath.Join(tmp, "README.md"), []byte(quantReadme(m.Config, mode))); err != nil {
		return err
	}
	return switchExportDir(tmp, dir)
}

// quantTensors returns the qweight and scale tensors of w (out, in).
func quantTensors(name string, w *forge.Tensor, mode string) []safetensors.Tensor {
	lv, sc := forge.Quantize(w, mode)
	r := lv.Contiguous().Float32s()
	out, in := w.Size(0), w.Size(1)
	if mode == forge.QuantInt8 {
		b := make([]byte, len(r))
		for i, v := range r {
			b[i] = byte(int8(v))
		}
		q := safetensors.Tensor{Name: name + ".qweight", DType: safetensors.DTypeI8, Shape: []int{out, in}, Data: b}
		return []safetensors.Tensor{q, safetensors.F32(name+".scale", []int{out, 1}, sc.Float32s())}
	}
	return []safetensors.Tensor{
		safetensors.U8(name+".qweight", []int{out, packedCols(in)}, packTernary(r, out, in)),
		safetensors.F32(name+".scale", []int{1}, sc.Float32s()),
	}
}

func packedCols(in int) int { return (in + 3) / 4 }

// packTernary packs levels −1, 0, 1 (rows × cols) as 2-bit codes r+1.
func packTernary(r []float32, rows, cols int) []byte {
	pc := packedCols(cols)
	b := make([]byte, rows*pc)
	for i := range rows {
		for j := range cols {
			code := byte(int(r[i*cols+j]) + 1)
			b[i*pc+j/4] |= code << (2 * (j % 4))
		}
	}
	return b
}

// unpackTernary is packTernary's inverse; a code 3 is an error.
func unpackTernary(b []byte, rows, cols int) ([]float32, error) {
	pc := packedCols(cols)
	r := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			code := b[i*pc+j/4] >> (2 * (j % 4)) & 3
			if code == 3 {
				return nil, fmt.Errorf("row %d column %d holds code 3, not a ternary level", i, j)
			}
			r[i*cols+j] = float32(int(code) - 1)
		}
	}
	return r, nil
}

// LoadQuantized reads an ExportQuantized directory: the model, whose block
// weights are the dequantised r·scale (so its forward equals the
// fake-quantised model's, bit for bit: the same float32 values reach the
// same matmuls), and the tokenizer (nil when the export has none). The
// model's Config.Quant is "none" (its weights are already on the
// quantisation grid); the export's mode is returned.
func LoadQuantized(dir string) (m *gpt.Model, tok tokenizer.Tokenizer, mode string, err error) {
	path := filepath.Join(dir, modelFile)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, nil, "", err
	}
	if f.Metadata["format"] != QuantFormat || f.Metadata["version"] != fmt.Sprint(quantFormatVersion) {
		return nil, nil, "", fmt.Errorf("train: %s is not a %s v%d export (format %q, version %q); forge export --quant writes one", path, QuantFormat, quantFormatVersion, f.Metadata["format"], f.Metadata["version"])
	}
	mode = f.Metadata["quant"]
	if mode != forge.QuantInt8 && mode != forge.QuantTernary {
		return nil, nil, "", fmt.Errorf("train: %s: quant %q: want int8 or ternary", path, mode)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, nil, "", fmt.Errorf("train: %v", err)
	}
	cfg, err := gpt.ParseConfig(b)
	if err != nil {
		return nil, nil, "", fmt.Errorf("train: %s: %v", filepath.Join(dir, "config.json"), err)
	}
	cfg.Quant = forge.QuantNone
	if m, err = gpt.New(cfg, 0); err != nil {
		return nil, nil, "", err
	}
	quant := map[*forge.Tensor]string{}
	for _, l := range m.BlockLinears() {
		quant[l.Layer.Weight] = l.Name
	}
	used := map[string]bool{}
	var errOut error
	fail := func(format string, a ...any) { errOut = fmt.Errorf("train: %s: "+format, append([]any{path}, a...)...) }
	err = forge.Try(func() {
		forge.NoGrad(func() {
			for _, p := range m.Params() {
				shape := p.Tensor.Shape()
				name, ok := quant[p.Tensor]
				if !ok {
					t, ok := f.Get(p.Name)
					if !ok || !slices.Equal(t.Shape, shape) {
						fail("no tensor %q of shape %v", p.Name, shape)
						return
					}
					v, err := t.Float32s()
					if err != nil {
						fail("%s: %v", p.Name, err)
						return
					}
					used[p.Name] = true
					p.Tensor.CopyFrom(forge.FromSlice(v, shape...).To(p.Tensor.Device()))
					continue
				}
				w, err := dequantize(f, name, mode, shape)
				if err != nil {
					fail("%v", err)
					return
				}
				used[name+".qweight"], used[name+".scale"] = true, true
				p.Tensor.CopyFrom(w.To(p.Tensor.Device()))
			}
		})
	})
	if err == nil {
		err = errOut
	}
	if err != nil {
		return nil, nil, "", err
	}
	for _, t := range f.Tensors {
		if !used[t.Name] {
			return nil, nil, "", fmt.Errorf("train: %s has a tensor %q the model does not have", path, t.Name)
		}
	}
	tp := filepath.Join(dir, "forge-tokenizer.json")
	if _, err := os.Stat(tp); err == nil {
		if tok, err = tokenizer.Load(tp); err != nil {
			return nil, nil, "", err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, "", fmt.Errorf("train: %v", err)
	}
	return m, tok, mode, nil
}

// dequantize reads name's levels and scale and returns levels·scale
// (out, in) as float32, the product FakeQuant computes.
func dequantize(f *safetensors.File, name, mode string, shape []int) (*forge.Tensor, error) {
	out, in := shape[0], shape[1]
	q, ok := f.Get(name + ".qweight")
	s, ok2 := f.Get(name + ".scale")
	if !ok || !ok2 {
		return nil, fmt.Errorf("no %s.qweight and %s.scale", name, name)
	}
	sv, err := s.Float32s()
	if err != nil {
		return nil, fmt.Errorf("%s.scale: %v", name, err)
	}
	var r []float32
	var scale *forge.Tensor
	if mode == forge.QuantInt8 {
		if q.DType != safetensors.DTypeI8 || !slices.Equal(q.Shape, shape) || !slices.Equal(s.Shape, []int{out, 1}) {
			return nil, fmt.Errorf("%s: want I8 %v levels and (%d, 1) scales, got %s %v and %v", name, shape, out, q.DType, q.Shape, s.Shape)
		}
		r = make([]float32, len(q.Data))
		for i, v := range q.Data {
			r[i] = float32(int8(v))
		}
		scale = forge.FromSlice(sv, out, 1)
	} else {
		if q.DType != safetensors.DTypeU8 || !slices.Equal(q.Shape, []int{out, packedCols(in)}) || !slices.Equal(s.Shape, []int{1}) {
			return nil, fmt.Errorf("%s: want U8 (%d, %d) packed levels and one scale, got %s %v and %v", name, out, packedCols(in), q.DType, q.Shape, s.Shape)
		}
		if r, err = unpackTernary(q.Data, out, in); err != nil {
			return nil, fmt.Errorf("%s.qweight: %v", name, err)
		}
		scale = forge.FromSlice(sv).Reshape() // () like Quantize's
	}
	return forge.FromSlice(r, out, in).Mul(scale), nil
}

func quantReadme(c gpt.Config, mode string) string {
	layout := "int8: `<name>.qweight` I8 (out, in) levels in [−127, 127], `<name>.scale` F32 (out, 1); W = qweight·scale per row"
	if mode == forge.QuantTernary {
		layout = "ternary: `<name>.qweight` U8 (out, ⌈in/4⌉), each byte four 2-bit codes r+1 (r ∈ {−1, 0, 1}), element j of a row in bits 2·(j mod 4) of byte j/4; `<name>.scale` F32 (1); W = r·scale"
	}
	return fmt.Sprintf(`# Quantised export from Forge (%s)

A Forge GPT (%d layers, d_model %d, %d heads, context %d, vocabulary %d padded to %d)
trained with quantisation-aware training, its block linear weights stored quantised.

model.safetensors (metadata format %q, version %d, quant %q):
- %s.
- <name> is the weight's parameter name without ".weight", e.g. blocks.0.attn.wqkv.
- Every other parameter (embedding, also the tied head; norms; an untied head) is F32 under
  its own name.

config.json is the gpt.Config. In Go, train.LoadQuantized(dir) rebuilds the model; its
logits equal the fake-quantised training model's bit for bit.
`, mode, c.Layers, c.Dim, c.Heads, c.Context, c.Vocab, c.PaddedVocab(), QuantFormat, quantFormatVersion, mode, layout)
}
