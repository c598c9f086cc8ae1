package train

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/forgeml/forge/forge/fmodel"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/forge/tokenizer"
)

// RepositoryDir is the model repository Session.Commit writes, inside the
// run directory.
const RepositoryDir = "model.forge"

// repoTokenizer is the tokenizer's name among a repository's files.
const repoTokenizer = "tokenizer.json"

// CommitOptions say how CommitModel stores a model.
type CommitOptions struct {
	// DType is the stored element type: "float32" (the default, ""; loads
	// without conversion), "float16" or "bfloat16" (half the bytes,
	// widened to float32 on load).
	DType   string
	Message string
	Meta    map[string]string // recorded beside "step" and "run"
}

// storeDType maps a CommitOptions.DType to the repository's dtype.
func storeDType(s string) (safetensors.DType, error) {
	switch s {
	case "", "float32", "f32":
		return safetensors.DTypeF32, nil
	case "float16", "f16":
		return safetensors.DTypeF16, nil
	case "bfloat16", "bf16":
		return safetensors.DTypeBF16, nil
	}
	return "", fmt.Errorf("train: repository dtype %q: want float32, float16 or bfloat16", s)
}

// CommitModel saves m (with its config, tokenizer and step) as a new
// revision of the .forge repository repo, creating it if needed. Only the
// tensors that changed since the current revision are written.
func CommitModel(repo string, m *gpt.Model, tok tokenizer.Tokenizer, cfg Config, step int, opt CommitOptions) (fmodel.CommitStats, error) {
	dt, err := storeDType(opt.DType)
	if err != nil {
		return fmodel.CommitStats{}, err
	}
	cfg.Model = m.Config
	cb, err := json.Marshal(cfg)
	if err != nil {
		return fmodel.CommitStats{}, fmt.Errorf("train: %v", err)
	}
	var ts []safetensors.Tensor
	for _, p := range m.Params() {
		v := p.Tensor.Float32s()
		switch dt {
		case safetensors.DTypeF16:
			ts = append(ts, safetensors.F16(p.Name, p.Tensor.Shape(), v))
		case safetensors.DTypeBF16:
			ts = append(ts, safetensors.BF16(p.Name, p.Tensor.Shape(), v))
		default:
			ts = append(ts, safetensors.F32(p.Name, p.Tensor.Shape(), v))
		}
	}
	files := map[string][]byte{}
	if mt, ok := tok.(interface{ Marshal() []byte }); ok {
		files[repoTokenizer] = mt.Marshal()
	}
	meta := map[string]string{"step": strconv.Itoa(step)}
	for k, v := range opt.Meta {
		meta[k] = v
	}
	msg := opt.Message
	if msg == "" {
		msg = fmt.Sprintf("step %d", step)
	}
	return fmodel.CommitTo(repo, fmodel.Commit{Tensors: ts, Files: files, Config: cb, Meta: meta, Message: msg})
}

// Commit saves the session's model as a new revision of the run's
// repository (RepositoryDir inside the run directory) with message.
func (s *Session) Commit(message string) (fmodel.CommitStats, error) {
	return CommitModel(filepath.Join(s.dir, RepositoryDir), s.model, s.tokenizer, s.config, s.trainer.StepCount(),
		CommitOptions{Message: message, Meta: map[string]string{"run": s.dir}})
}

// IsRepository reports whether dir is a .forge model repository (rather
// than a run directory).
func IsRepository(dir string) bool { return fmodel.IsRepository(dir) }

// LoadRepository reads revision rev ("" = HEAD, "HEAD~N", or a hash
// prefix) of the .forge repository dir as a Snapshot: its config,
// tokenizer and model, weights widened to float32 where they were stored
// in 16 bits. Snapshot.Dir is the repository; it has no run state.
func LoadRepository(dir, rev string) (*Snapshot, error) {
	r, err := fmodel.Open(dir)
	if err != nil {
		return nil, err
	}
	s, err := r.Load(rev)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	where := fmt.Sprintf("%s at %s", dir, fmodel.Short(s.Hash))
	if len(s.Manifest.Config) == 0 {
		return nil, fmt.Errorf("train: %s has no config; it was not written by Forge's trainer", where)
	}
	cfg, err := ParseConfig(s.Manifest.Config)
	if err != nil {
		return nil, fmt.Errorf("train: %s: %w", where, err)
	}
	tb, err := s.File(repoTokenizer)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Unmarshal(tb)
	if err != nil {
		return nil, fmt.Errorf("train: %s: %w", where, err)
	}
	if err := cfg.CheckWeightMemory(); err != nil {
		return nil, err
	}
	m, err := gpt.New(cfg.Model, cfg.Seed)
	if err != nil {
		return nil, err
	}
	if err := fillParams(where, &safetensors.File{Tensors: s.Tensors()}, "", m); err != nil {
		return nil, err
	}
	step, _ := strconv.Atoi(s.Manifest.Meta["step"])
	return &Snapshot{Dir: dir, Config: cfg, Tokenizer: tok, Model: m, Step: step, Revision: s.Hash}, nil
}
