package train

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"unsafe"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/internal/atomicfile"
)

const (
	stateFormat  = "forge-run-state"
	stateVersion = 1
	stateFile    = "state.json"
	modelFile    = "model.safetensors"
	optimFile    = "optim.safetensors"
)

// State is a checkpoint's state.json: everything besides the tensors that
// an exact resume needs.
type State struct {
	Format     string            `json:"format"`
	Version    int               `json:"version"`
	Step       int               `json:"step"`    // optimizer updates made
	History    int               `json:"history"` // records of metrics.jsonl that belong to this checkpoint
	Tokens     int64             `json:"tokens"`  // training tokens seen
	Loader     data.LoaderState  `json:"loader"`
	Dropout    [4]uint64         `json:"dropout_rng"`
	LROverride *float64          `json:"lr_override,omitempty"`
	Files      map[string]string `json:"files"` // sha256 of each tensor file

	// TokenFiles are the run's token files (data/train.bin, data/val.bin)
	// as they were when the run was created: valid but different ids
	// would train without an error, so Open checks them (absent in
	// checkpoints of older versions, which are not checked).
	TokenFiles map[string]FileSum `json:"token_files,omitempty"`

	// float16's dynamic loss scale and its good steps in a row (absent
	// for other precisions; a float16 run without them starts afresh).
	LossScale     float64 `json:"loss_scale,omitempty"`
	LossScaleGood int     `json:"loss_scale_good,omitempty"`
}

// FileSum is a file's size and SHA-256 (hex).
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SaveWeights writes the model's parameters to a safetensors file (names
// as in gpt.Model.Params) with the config in its metadata, and the
// pruning mask of each masked Linear as "mask.<its weight's name>"
// (blocks.0.attn.wqkv's as mask.blocks.0.attn.wqkv.weight, float32 0/1).
func SaveWeights(path string, m *gpt.Model) error {
	cfg, _ := json.Marshal(m.Config)
	ts := paramTensors("", m)
	for _, l := range m.Linears() {
		if mk := l.Layer.Mask; mk != nil {
			ts = append(ts, safetensors.F32(maskPrefix+l.Name+".weight", mk.Shape(), mk.Cast(forge.Float32).Float32s()))
		}
	}
	return safetensors.WriteFile(path, ts, map[string]string{"format": "forge", "config": string(cfg)})
}

// maskPrefix starts the names of the masks in a weights file.
const maskPrefix = "mask."

// LoadWeights reads parameters saved by SaveWeights into m, and its masks:
// a Linear whose mask the file holds gets it, every other Linear none.
func LoadWeights(path string, m *gpt.Model) error {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return err
	}
	if err := fillParams(path, f, "", m); err != nil {
		return err
	}
	return fillMasks(path, f, m)
}

// fillMasks sets the masks of m's Linears from f.
func fillMasks(path string, f *safetensors.File, m *gpt.Model) error {
	return forge.Try(func() {
		for _, l := range m.Linears() {
			t, ok := f.Get(maskPrefix + l.Name + ".weight")
			if !ok {
				l.Layer.SetMask(nil)
				continue
			}
			v, err := t.Float32s()
			if err != nil {
				panic(&forge.Error{Op: "train.load_weights", Msg: fmt.Sprintf("%s: mask of %s: %v", path, l.Name, err)})
			}
			l.Layer.SetMask(forge.FromSlice(v, t.Shape...).To(l.Layer.Weight.Device()))
		}
	})
}

func paramTensors(prefix string, m *gpt.Model) []safetensors.Tensor {
	var ts []safetensors.Tensor
	for _, p := range m.Params() {
		ts = append(ts, safetensors.F32(prefix+p.Name, p.Tensor.Shape(), p.Tensor.Float32s()))
	}
	return ts
}

func fillParams(path string, f *safetensors.File, prefix string, m *gpt.Model) error {
	_, err := fillParamsAliasing(path, f, prefix, m, nil)
	return err
}

// aliasFunc returns the bytes of the float32 tensor name for use in place
// (forge's Tensor.AliasBytes) and their owner, or ok false.
type aliasFunc func(name string) (mem []byte, keep any, ok bool)

// fillParamsAliasing is fillParams where a parameter whose float32 bytes
// alias gives may take them as its memory in place, read-only, instead
// of copying; it returns how many did.
func fillParamsAliasing(path string, f *safetensors.File, prefix string, m *gpt.Model, alias aliasFunc) (int, error) {
	aliased := 0
	want := map[string]bool{}
	var errOut error
	err := forge.Try(func() {
		forge.NoGrad(func() {
			for _, p := range m.Params() {
				name := prefix + p.Name
				want[name] = true
				t, ok := f.Get(name)
				if !ok {
					errOut = fmt.Errorf("train: %s has no tensor %q; it was saved for another model", path, name)
					return
				}
				if !slices.Equal(t.Shape, p.Tensor.Shape()) {
					errOut = fmt.Errorf("train: %s: tensor %q has shape %v, the model wants %v", path, name, t.Shape, p.Tensor.Shape())
					return
				}
				if alias != nil && t.DType == safetensors.DTypeF32 {
					if mem, keep, ok := alias(name); ok && p.Tensor.AliasBytes(mem, keep) == nil {
						aliased++
						continue
					}
				}
				v, err := float32sOf(t)
				if err != nil {
					errOut = fmt.Errorf("train: %s: tensor %q: %v", path, name, err)
					return
				}
				p.Tensor.CopyFrom(forge.FromSlice(v, t.Shape...).To(p.Tensor.Device()))
			}
		})
	})
	if err != nil {
		return aliased, err
	}
	if errOut != nil {
		return aliased, errOut
	}
	for _, l := range m.Linears() {
		want[maskPrefix+l.Name+".weight"] = true // optional; fillMasks reads it
	}
	for _, t := range f.Tensors {
		if len(prefix) <= len(t.Name) && t.Name[:len(prefix)] == prefix && !want[t.Name] {
			return aliased, fmt.Errorf("train: %s has a tensor %q the model does not have; it was saved for another model", path, t.Name)
		}
	}
	return aliased, nil
}

// saveCheckpoint writes the weights and the optimizer state into dir and
// records their checksums in st. optim.safetensors holds AdamW's moments
// as "m.<param>" and "v.<param>" and, for Muon, the Muon group's momenta
// as "momentum.<param>" with metadata "optimizer": "muon" (absent: AdamW,
// as in every file before Muon).
func saveCheckpoint(dir string, m *gpt.Model, opt optim.Optimizer, st *State) error {
	if err := SaveWeights(filepath.Join(dir, modelFile), m); err != nil {
		return err
	}
	adam, muon, err := optimizers(opt)
	if err != nil {
		return err
	}
	ost := adam.State()
	var ts []safetensors.Tensor
	for i, p := range adam.Params() {
		ts = append(ts,
			safetensors.F32("m."+p.Name(), p.Shape(), ost.M[i].Float32s()),
			safetensors.F32("v."+p.Name(), p.Shape(), ost.V[i].Float32s()))
	}
	meta := map[string]string{"step": fmt.Sprint(ost.Step)}
	if muon != nil {
		meta["optimizer"] = "muon"
		mst := muon.State()
		for i, p := range muon.MuonParams() {
			ts = append(ts, safetensors.F32("momentum."+p.Name(), p.Shape(), mst.Momentum[i].Float32s()))
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, optimFile), ts, meta); err != nil {
		return err
	}
	for _, f := range []string{modelFile, optimFile} {
		sum, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		st.Files[f] = sum
	}
	return nil
}

// optimizers returns the AdamW that holds opt's moments and, for Muon,
// the Muon itself.
func optimizers(opt optim.Optimizer) (*optim.AdamW, *optim.Muon, error) {
	switch o := opt.(type) {
	case *optim.AdamW:
		return o, nil, nil
	case *optim.Muon:
		return o.AdamW(), o, nil
	}
	return nil, nil, fmt.Errorf("train: cannot checkpoint an optimizer of type %T (want *optim.AdamW or *optim.Muon)", opt)
}

// loadCheckpoint verifies the files of dir against st and loads them.
func loadCheckpoint(dir string, m *gpt.Model, opt optim.Optimizer, st *State) error {
	if err := verifyFiles(dir, st); err != nil {
		return err
	}
	adam, muon, err := optimizers(opt)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, optimFile)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return err
	}
	saved, want := f.Metadata["optimizer"], ""
	if muon != nil {
		want = "muon"
	}
	if saved != want {
		name := func(s string) string {
			if s == "" {
				return "adamw"
			}
			return s
		}
		return fmt.Errorf("train: %s holds the state of optimizer %q, but the run's config says %q; resume with the config it was saved with", path, name(saved), name(want))
	}
	if err := LoadWeights(filepath.Join(dir, modelFile), m); err != nil {
		return err
	}
	tensor := func(name string, shape []int) (*forge.Tensor, error) {
		t, ok := f.Get(name)
		if !ok || !slices.Equal(t.Shape, shape) {
			return nil, fmt.Errorf("train: %s: no tensor %q of shape %v", path, name, shape)
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("train: %s: %v", path, err)
		}
		return forge.FromSlice(v, t.Shape...), nil
	}
	var s optim.AdamWState
	s.Step = st.Step
	for _, p := range adam.Params() {
		mt, err := tensor("m."+p.Name(), p.Shape())
		if err != nil {
			return err
		}
		vt, err := tensor("v."+p.Name(), p.Shape())
		if err != nil {
			return err
		}
		s.M, s.V = append(s.M, mt), append(s.V, vt)
	}
	if muon == nil {
		return forge.Try(func() { adam.LoadState(s) })
	}
	ms := optim.MuonState{AdamW: s}
	for _, p := range muon.MuonParams() {
		t, err := tensor("momentum."+p.Name(), p.Shape())
		if err != nil {
			return err
		}
		ms.Momentum = append(ms.Momentum, t)
	}
	return forge.Try(func() { muon.LoadState(ms) })
}

func fileSHA256(path string) (string, error) {
	_, sum, err := data.FileDigest(path) // streamed: a checkpoint is not read whole for it
	return sum, err
}

// writeJSON writes v as indented JSON, atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// writeFileAtomic writes b to path atomically.
func writeFileAtomic(path string, b []byte) error {
	if err := atomicfile.WriteBytes(path, b); err != nil {
		return fmt.Errorf("train: writing %s: %w", path, err)
	}
	return nil
}

// verifyFiles checks the tensor files of a checkpoint against the
// checksums its state recorded.
func verifyFiles(dir string, st *State) error {
	for _, f := range []string{modelFile, optimFile} {
		sum, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if sum != st.Files[f] {
			return fmt.Errorf("%s: checksum mismatch (the file is damaged)", filepath.Join(dir, f))
		}
	}
	return nil
}

// float32sOf is t.Float32s, except that little-endian float32 bytes
// aligned for float32 are viewed in place rather than copied (a mapped
// repository shard or a checkpoint read whole); the caller must not keep
// the slice beyond the bytes' life (forge.FromSlice copies it).
func float32sOf(t safetensors.Tensor) ([]float32, error) {
	if t.DType == safetensors.DTypeF32 && len(t.Data) > 0 && littleEndian &&
		uintptr(unsafe.Pointer(&t.Data[0]))%unsafe.Alignof(float32(0)) == 0 {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n*4 == len(t.Data) {
			return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
		}
	}
	return t.Float32s()
}

// littleEndian reports whether this machine stores float32 as the files do.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
