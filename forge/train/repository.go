package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/forgeml/forge/forge"
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

// Commit saves the session's model as a new revision of its repository
// (Repository) with message.
func (s *Session) Commit(message string) (fmodel.CommitStats, error) {
	return CommitModel(s.Repository(), s.model, s.tokenizer, s.config, s.trainer.StepCount(),
		CommitOptions{Message: message, Meta: map[string]string{"run": s.dir}})
}

// Repository is where Commit writes: the repository the run started from
// (OpenOptions.From), else RepositoryDir inside the run directory.
func (s *Session) Repository() string {
	if s.repo != "" {
		return s.repo
	}
	return filepath.Join(s.dir, RepositoryDir)
}

// fromFile records, in a run started from a repository, which one.
const fromFile = "from.json"

type fromRecord struct {
	Repository string `json:"repository"`
	Revision   string `json:"revision"`
	Step       int    `json:"step"`
}

// fromRepository makes the options of a new run started from snap: its
// config unless one is given, which must then be of the same model.
func (o *OpenOptions) fromRepository(snap *Snapshot) error {
	if o.Prepared != "" {
		return fmt.Errorf("train: a run started from %s tokenizes its text with the model's tokenizer; give text files, not the prepared directory %s", o.From, o.Prepared)
	}
	if o.Config == nil && o.ConfigName != "" {
		cfg, err := LoadConfig(o.ConfigName)
		if err != nil {
			return err
		}
		o.Config = &cfg
	}
	if o.Config == nil {
		cfg := snap.Config
		o.Config = &cfg
		return nil
	}
	if o.Config.Model != snap.Config.Model {
		return fmt.Errorf("train: %s holds a model of another shape than the config %s; start from it without a config, or change only how it trains", o.From, o.Config.Name)
	}
	if o.Tokenizer != "" && o.Tokenizer != snap.Config.Tokenizer {
		return fmt.Errorf("train: %s has a %s tokenizer; a run started from it keeps it", o.From, snap.Config.Tokenizer)
	}
	return nil
}

// startFrom copies the starting revision's weights into the new run's
// model and records where they came from.
func (s *Session) startFrom(repo string) error {
	src := s.from.Model.Params()
	err := forge.Try(func() {
		forge.NoGrad(func() {
			for i, p := range s.model.Params() {
				p.Tensor.CopyFrom(src[i].Tensor.To(p.Tensor.Device()))
			}
		})
	})
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(repo)
	if err != nil {
		abs = repo
	}
	s.repo = abs
	rec := fromRecord{Repository: abs, Revision: s.from.Revision, Step: s.from.Step}
	s.from = nil
	return writeJSON(filepath.Join(s.dir, fromFile), rec)
}

// readFrom returns the repository a run started from ("" for none).
func readFrom(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, fromFile))
	if err != nil {
		return ""
	}
	var r fromRecord
	if json.Unmarshal(b, &r) != nil {
		return ""
	}
	return r.Repository
}

// IsRepository reports whether dir is a .forge model repository (rather
// than a run directory).
func IsRepository(dir string) bool { return fmodel.IsRepository(dir) }

// LoadRepository reads revision rev ("" = HEAD, "HEAD~N", or a hash
// prefix) of the .forge repository dir as a Snapshot: its config,
// tokenizer and model, weights widened to float32 where they were stored
// in 16 bits. Snapshot.Dir is the repository; it has no run state. The
// model is the caller's to train: its weights are copies (MapRepository
// maps them instead, for reading).
func LoadRepository(dir, rev string) (*Snapshot, error) { return loadRepository(dir, rev, false) }

// MapRepository is LoadRepository for a model that is only read
// (generation, evaluation, export): every float32 weight is the mapped
// shard itself, used in place by the device with no copy where it can —
// the CPU always, Metal on Apple silicon through newBufferWithBytesNoCopy,
// so the file cache is the GPU's memory — and those weights are
// read-only (Snapshot.Mapped counts them; a write to one panics naming
// it). Weights stored in 16 bits, or split across shards, are copied. The
// mapping lasts as long as the model does.
func MapRepository(dir, rev string) (*Snapshot, error) { return loadRepository(dir, rev, true) }

func loadRepository(dir, rev string, mapped bool) (*Snapshot, error) {
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
	m, err := gpt.NewEmpty(cfg.Model, cfg.Seed)
	if err != nil {
		return nil, err
	}
	var alias aliasFunc
	if mapped {
		index := map[string]int{}
		for i, e := range s.Manifest.Tensors {
			index[e.Name] = i
		}
		alias = func(name string) ([]byte, any, bool) {
			i, ok := index[name]
			if !ok {
				return nil, nil, false
			}
			return s.Lend(i)
		}
	}
	n, err := fillParamsAliasing(where, &safetensors.File{Tensors: s.Tensors()}, "", m, alias)
	if err != nil {
		return nil, err
	}
	m.SetTraining(false)
	step, _ := strconv.Atoi(s.Manifest.Meta["step"])
	return &Snapshot{Dir: dir, Config: cfg, Tokenizer: tok, Model: m, Step: step, Revision: s.Hash, Mapped: n}, nil
}
