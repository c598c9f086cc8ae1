package train

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/internal/atomicfile"
)

// Files of a run directory.
const (
	ConfigFile      = "config.json"
	TokenizerFile   = "tokenizer.json"
	DataDir         = "data"
	SourceFile      = "data/source.json"
	MetricsFile     = "metrics.jsonl"
	CheckpointDir   = "checkpoints"
	LatestFile      = "checkpoints/latest"
	keepCheckpoints = 2
)

// Session is a run directory opened for training: config, tokenizer,
// token files, the latest checkpoint (weights, optimizer moments, RNG and
// loader state) and the metrics history, one JSON line per step:
//
//	run/config.json
//	run/tokenizer.json
//	run/data/train.bin, val.bin, source.json
//	run/checkpoints/step-000120/{model,optim}.safetensors, state.json
//	run/checkpoints/latest            the name of the newest complete checkpoint
//	run/metrics.jsonl
//
// Every file is written to a temporary name and renamed into place, and a
// checkpoint directory is complete before `latest` names it, so a crash at
// any moment leaves a run that opens at its last good checkpoint. Resuming
// is exact: N steps, Save, Open, M steps gives the losses of N+M steps in
// one go, bit for bit.
//
// The directory, config, tokenizer, model, trainer and loaders are read
// through methods and cannot be replaced: the trainer holds the model's
// parameters and optimizer moments, and a checkpoint pairs them with the
// loaders' positions, so swapping one alone would train, save and report
// different things. To train another model, open another run.
type Session struct {
	dir       string
	config    Config
	tokenizer tokenizer.Tokenizer
	model     *gpt.Model
	trainer   *Trainer
	trainData *data.Loader // the training tokens and their position
	valData   *data.Loader // the validation tokens

	log      io.Writer
	metrics  *os.File // append-only metrics.jsonl
	saved    int      // step of the last checkpoint
	savedRec int      // records of the history at the last checkpoint
	resumed  bool
	fellBack string // why an older checkpoint was used, if it was
	lock     *runLock

	tokenSums map[string]FileSum // the token files as the run was created
	lastRun   Summary

	repo string    // the .forge repository Commit writes ("": RepositoryDir in the run)
	from *Snapshot // the repository revision a new run starts from (create only)
}

// OpenOptions configure Open.
type OpenOptions struct {
	// Config is the run's config when Open creates it (nil: DefaultConfig).
	// For an existing run it must be nil or describe the same model and
	// batch shape; its other fields (steps, lr, schedule, eval and save
	// cadence) replace the saved ones.
	Config *Config
	// ConfigName is Config by name, loaded by Open when Config is nil: an
	// embedded config ("tiny", "small", …) or a .json file (LoadConfig).
	// "" keeps an existing run's saved config.
	ConfigName string
	// DefaultConfigName is the config of a new run when neither Config
	// nor ConfigName is given ("": DefaultConfig). The front ends pass
	// "tiny".
	DefaultConfigName string
	// Tokenizer, when set, replaces the tokenizer ("bpe" or "char") of the
	// config Open creates the run with or is given; a resumed run keeps
	// its own.
	Tokenizer string
	// Texts is the training text of a new run (nil: the built-in corpus).
	Texts []string
	// Source describes the texts for data/source.json ("austen", file names).
	Source string
	// Log receives progress lines (tokenizer training, encoding); nil: quiet.
	Log io.Writer
	// Prepared is a directory written by `forge prepare` (data.Prepare):
	// tokenizer.json, train.bin and val.bin, used instead of Texts. The
	// model's vocabulary must hold the tokenizer's (a char tokenizer sets
	// it).
	Prepared string
	// NoCache turns off the prepared-corpus cache under the user's cache
	// directory (FORGE_CACHE_DIR overrides its location).
	NoCache bool
	// Data are text files, or one directory of `forge prepare`, to create
	// the run on (see UseData); a run that exists keeps its own data, and
	// Open refuses Data for it with an error wrapping ErrRunHasData.
	Data []string
	// From is a .forge repository a new run starts from (fine-tuning):
	// its config (Config may change how it trains, not the model), its
	// tokenizer (the run's text is tokenized with it) and its weights, at
	// FromRevision ("": HEAD). Session.Commit then commits to that
	// repository. Opening a repository's own path does this, with the run
	// directory beside it (RunDirOf).
	From         string
	FromRevision string
}

// RunDirOf is the run directory Open uses for the .forge repository repo
// opened directly: repo with ".run" appended.
func RunDirOf(repo string) string { return filepath.Clean(repo) + ".run" }

// loadConfig sets Config from ConfigName, or for a new run from
// DefaultConfigName, and applies Tokenizer to it.
func (o *OpenOptions) loadConfig(dir string) error {
	name := o.ConfigName
	if name == "" && !Exists(dir) {
		name = o.DefaultConfigName
	}
	if o.Config == nil && name != "" {
		cfg, err := LoadConfig(name)
		if err != nil {
			return err
		}
		o.Config = &cfg
	}
	if o.Tokenizer == "" {
		return nil
	}
	if o.Config == nil {
		if Exists(dir) {
			return nil // a resumed run keeps its tokenizer
		}
		cfg := DefaultConfig()
		o.Config = &cfg
	}
	cfg := *o.Config
	cfg.Tokenizer = o.Tokenizer
	if err := cfg.Validate(); err != nil {
		return err
	}
	o.Config = &cfg
	return nil
}

// DefaultRunDir is the directory a run of the named config goes in when
// none is given: runs/<the config's name>.
func DefaultRunDir(config string) (string, error) {
	cfg, err := LoadConfig(config)
	if err != nil {
		return "", err
	}
	return filepath.Join("runs", cfg.Name), nil
}

// ErrRunHasData is wrapped by Open's error when Data is given for a run
// that already exists.
var ErrRunHasData = errors.New("the run already has its data")

// Exists reports whether dir holds a run (its config.json is there).
func Exists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ConfigFile))
	return err == nil
}

// Open creates the run directory dir, or resumes the run in it. The
// session is the run's one writer: it holds the directory's lock (LockFile)
// until Close, and a second Open of the same directory, from this process
// or another, is refused with the holder's pid and command. Leftovers of
// interrupted writes (checkpoints/.tmp-*, temporary files) are removed.
func Open(dir string, opts OpenOptions) (*Session, error) {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	if IsRepository(dir) {
		if opts.From != "" && filepath.Clean(opts.From) != filepath.Clean(dir) {
			return nil, fmt.Errorf("train: %s is a .forge repository; open it, or a run directory with From %s, not both", dir, opts.From)
		}
		opts.From, dir = dir, RunDirOf(dir)
		fmt.Fprintf(log, "%s is a .forge repository: its run directory is %s\n", opts.From, dir)
	}
	var from *Snapshot
	if opts.From != "" && !Exists(dir) {
		snap, err := MapRepository(opts.From, opts.FromRevision)
		if err != nil {
			return nil, err
		}
		if err := opts.fromRepository(snap); err != nil {
			return nil, err
		}
		from = snap
		fmt.Fprintf(log, "starting from %s at revision %s (step %d of its training)\n", opts.From, snap.Revision[:12], snap.Step)
	}
	if err := opts.loadConfig(dir); err != nil {
		return nil, err
	}
	s := &Session{dir: dir, log: log, from: from}
	if len(opts.Data) > 0 {
		if Exists(dir) {
			return nil, fmt.Errorf("train: %s already holds a run with its own data (%w); choose a new directory to train on %s", dir, ErrRunHasData, strings.Join(opts.Data, ", "))
		}
		if err := opts.UseData(opts.Data); err != nil {
			return nil, err
		}
	}
	_, err := os.Stat(filepath.Join(dir, ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		// Check what can be checked before making anything.
		cfg := DefaultConfig()
		if opts.Config != nil {
			cfg = *opts.Config
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		if err := cfg.CheckMemory(); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("train: creating the run directory: %v", err)
		}
	}
	if s.lock, err = lockRun(dir); err != nil {
		return nil, err
	}
	s.removeOrphans()
	// Stat again: a writer that held the lock until now may have created it.
	_, err = os.Stat(filepath.Join(dir, ConfigFile))
	switch {
	case err == nil:
		err = s.resume(opts)
	case errors.Is(err, os.ErrNotExist):
		err = s.create(opts)
	default:
		err = fmt.Errorf("train: %v", err)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Dir is the run directory.
func (s *Session) Dir() string { return s.dir }

// Config is the run's config.
func (s *Session) Config() Config { return s.config }

// Tokenizer is the run's tokenizer.
func (s *Session) Tokenizer() tokenizer.Tokenizer { return s.tokenizer }

// Model is the model the session trains. Its weights may be read and
// used (forward, sample); the session saves them with the trainer's state.
func (s *Session) Model() *gpt.Model { return s.model }

// Trainer is the session's trainer: the optimizer over Model's parameters.
func (s *Session) Trainer() *Trainer { return s.trainer }

// TrainData is the loader of the training tokens.
func (s *Session) TrainData() *data.Loader { return s.trainData }

// ValData is the loader of the validation tokens.
func (s *Session) ValData() *data.Loader { return s.valData }

// Resumed reports whether Open continued an existing run.
func (s *Session) Resumed() bool { return s.resumed }

// FellBack says why Open used an older checkpoint than `latest` named ("" if
// it did not).
func (s *Session) FellBack() string { return s.fellBack }

func (s *Session) create(opts OpenOptions) error {
	cfg := DefaultConfig()
	if opts.Config != nil {
		cfg = *opts.Config
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	texts, source := opts.Texts, opts.Source
	if texts == nil {
		texts, source = []string{data.Austen()}, data.DefaultCorpus
	}
	if err := os.MkdirAll(filepath.Join(s.dir, CheckpointDir), 0o755); err != nil {
		return fmt.Errorf("train: creating the run directory: %v", err)
	}
	var tok tokenizer.Tokenizer
	var err error
	switch {
	case s.from != nil:
		tok, err = prepareWith(s.from.Tokenizer, texts, source, cfg, filepath.Join(s.dir, DataDir), s.log, false)
	case opts.Prepared != "":
		tok, err = usePrepared(opts.Prepared, filepath.Join(s.dir, DataDir), &cfg)
	default:
		tok, err = prepare(texts, source, cfg, filepath.Join(s.dir, DataDir), s.log, !opts.NoCache)
	}
	if err != nil {
		return err
	}
	if cfg.Tokenizer == "char" {
		cfg.Model.Vocab = tok.VocabSize()
	}
	if err := tok.Save(filepath.Join(s.dir, TokenizerFile)); err != nil {
		return err
	}
	s.config, s.tokenizer = cfg, tok
	// A creation that died before writing the config may have left metrics.
	if err := os.Remove(filepath.Join(s.dir, MetricsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("train: %v", err)
	}
	if err := s.build(); err != nil {
		return err
	}
	if s.from != nil {
		if err := s.startFrom(opts.From); err != nil {
			return err
		}
	}
	if s.tokenSums, err = tokenFileSums(s.dir); err != nil {
		return err
	}
	// The config goes last: its presence marks a run directory as created.
	if err := s.Save(); err != nil {
		return err
	}
	return writeJSON(filepath.Join(s.dir, ConfigFile), cfg)
}

func (s *Session) build() error {
	cfg := s.config
	m, err := gpt.New(cfg.Model, cfg.Seed)
	if err != nil {
		return err
	}
	s.trainData, err = data.OpenLoader(TrainData(s.dir), cfg.Batch, cfg.Model.Context, cfg.Seed+1)
	if err != nil {
		return err
	}
	s.valData, err = data.OpenLoader(ValData(s.dir), cfg.Batch, cfg.Model.Context, cfg.Seed+2)
	if err != nil {
		return err
	}
	val := func() (xs, ys [][]int32) {
		for x, y := range s.valData.Eval(cfg.EvalBatches) {
			xs, ys = append(xs, x), append(ys, y)
		}
		return xs, ys
	}
	s.model = m
	s.trainer, err = NewTrainer(cfg, m, s.trainData, val)
	if err != nil {
		return err
	}
	return s.openMetrics()
}

func (s *Session) resume(opts OpenOptions) error {
	s.resumed = true
	b, err := os.ReadFile(filepath.Join(s.dir, ConfigFile))
	if err != nil {
		return fmt.Errorf("train: %v", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return fmt.Errorf("train: %s: %w", filepath.Join(s.dir, ConfigFile), err)
	}
	if opts.Config != nil {
		o := *opts.Config
		if o.Tokenizer == "char" {
			o.Model.Vocab = cfg.Model.Vocab
		}
		// Checkpointing changes what the backward keeps, not the model:
		// a run may resume with it turned on or off.
		om, cm := o.Model, cfg.Model
		om.Checkpoint, cm.Checkpoint = gpt.Blocks{}, gpt.Blocks{}
		if om != cm || o.Batch != cfg.Batch || o.Seed != cfg.Seed || o.Tokenizer != cfg.Tokenizer {
			return fmt.Errorf("train: %s holds a run of another model or batch shape (%s); open it without a config to resume it, or choose a new directory", s.dir, cfg.Name)
		}
		if err := o.Validate(); err != nil {
			return err
		}
		cfg = o
	}
	if err := cfg.CheckMemory(); err != nil {
		return err
	}
	s.config = cfg
	s.tokenizer, err = tokenizer.Load(filepath.Join(s.dir, TokenizerFile))
	if err != nil {
		return err
	}
	if s.tokenizer.VocabSize() > cfg.Model.Vocab {
		return fmt.Errorf("train: %s: the tokenizer has %d tokens but the model only %d", s.dir, s.tokenizer.VocabSize(), cfg.Model.Vocab)
	}
	if err := s.build(); err != nil {
		return err
	}
	s.repo = readFrom(s.dir)
	return s.loadLatest()
}

// PruneByMagnitude masks the smallest-magnitude fraction sparsity of each
// of the model's Linear layers (nn.PruneByMagnitude: per layer, the blocks'
// and an untied head's; the tied embedding is never pruned) and saves a
// checkpoint, so the masks are part of the run from here on: the trainer
// keeps the pruned weights at zero and every later checkpoint, and so
// resume, carries the masks.
func (s *Session) PruneByMagnitude(sparsity float64) error {
	if err := nn.PruneByMagnitude(s.model.Linears(), sparsity); err != nil {
		return err
	}
	return s.Save()
}

// Save writes a checkpoint of the current step and makes it the latest.
func (s *Session) Save() error {
	step := s.trainer.StepCount()
	if bad := NonFiniteParams(s.model); len(bad) > 0 {
		return fmt.Errorf("train: not saving step %d: %d parameters hold NaN or infinity (first: %s); the last checkpoint is kept as it was", step, len(bad), bad[0])
	}
	name := fmt.Sprintf("step-%06d", step)
	root := filepath.Join(s.dir, CheckpointDir)
	tmp, err := atomicfile.MkdirTemp(root, ".tmp-"+name+"-")
	if err != nil {
		return fmt.Errorf("train: saving: %v", err)
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left
	st := State{
		Format: stateFormat, Version: stateVersion, Step: step,
		History: len(s.trainer.History.Steps), Tokens: s.trainer.tokens,
		Loader: s.trainData.State(), Dropout: s.model.DropoutGenerator().State(),
		LROverride: s.trainer.lrSet, Files: map[string]string{},
		TokenFiles: s.tokenSums,
	}
	if sc := s.trainer.scaler; sc != nil {
		st.LossScale, st.LossScaleGood = sc.scale, sc.good
	}
	if err := saveCheckpoint(tmp, s.model, s.trainer.Opt, &st); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(tmp, stateFile), st); err != nil {
		return err
	}
	// A step saved again (Save after a change that is not a step) goes to
	// a new name, step-N-001 and on: the directory `latest` names is never
	// removed before its replacement is complete and named; prune removes
	// it after.
	dst := filepath.Join(root, name)
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		name = fmt.Sprintf("step-%06d-%03d", step, i)
		dst = filepath.Join(root, name)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("train: saving: %v", err)
	}
	atomicfile.SyncDir(root)
	if err := writeFileAtomic(filepath.Join(s.dir, LatestFile), []byte(name+"\n")); err != nil {
		return err
	}
	s.saved, s.savedRec = step, len(s.trainer.History.Steps)
	s.prune(name)
	return nil
}

// TrainData is the run's training tokens: data/train.bin, or the
// directory of shards data/train/ of a corpus `forge prepare` streamed.
func TrainData(dir string) string { return splitData(dir, data.TrainFile, "train") }

// ValData is the run's validation tokens: data/val.bin or data/val/.
func ValData(dir string) string { return splitData(dir, data.ValFile, "val") }

func splitData(dir, file, shards string) string {
	p := filepath.Join(dir, DataDir, shards)
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return p
	}
	return filepath.Join(dir, DataDir, file)
}

// tokenFiles lists the run's token files relative to data/: train.bin
// and val.bin, or every shard (train/000000.bin, …).
func tokenFiles(dir string) []string {
	var out []string
	for _, p := range []string{TrainData(dir), ValData(dir)} {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			files, _ := data.ShardFiles(p)
			for _, f := range files {
				out = append(out, filepath.Base(p)+"/"+filepath.Base(f))
			}
			if len(files) == 0 {
				out = append(out, filepath.Base(p)+"/000000.bin") // reported missing
			}
			continue
		}
		out = append(out, filepath.Base(p))
	}
	return out
}

// tokenFileSums digests the run's token files.
func tokenFileSums(dir string) (map[string]FileSum, error) {
	sums := map[string]FileSum{}
	for _, f := range tokenFiles(dir) {
		size, sum, err := data.FileDigest(filepath.Join(dir, DataDir, f))
		if err != nil {
			return nil, fmt.Errorf("train: %v", err)
		}
		sums[f] = FileSum{Size: size, SHA256: sum}
	}
	return sums, nil
}

// checkTokenFiles compares the run's token files with what a checkpoint
// recorded (nothing to compare for a checkpoint of an older version: the
// files are digested now, and the next save records them).
func (s *Session) checkTokenFiles(want map[string]FileSum) error {
	if s.tokenSums == nil {
		sums, err := tokenFileSums(s.dir)
		if err != nil {
			return err
		}
		s.tokenSums = sums
	}
	for f := range s.tokenSums {
		if _, ok := want[f]; !ok && len(want) > 0 && strings.Contains(f, "/") {
			return tokenFileErrorf("train: %s was not among the token files this run was trained on: restore the run's data, or start a new run on the new data", filepath.Join(s.dir, DataDir, f))
		}
	}
	for f, w := range want {
		got, ok := s.tokenSums[f]
		if !ok {
			return tokenFileErrorf("train: %s is missing: the run was trained on it; restore it, or start a new run", filepath.Join(s.dir, DataDir, f))
		}
		if got != w {
			return tokenFileErrorf("train: %s is not the token file this run was trained on (%d bytes, sha256 %.12s… recorded; %d bytes, %.12s… now): restore it, or start a new run on the new data",
				filepath.Join(s.dir, DataDir, f), w.Size, w.SHA256, got.Size, got.SHA256)
		}
	}
	return nil
}

// tokenFileError is a token file that differs from the checkpoint's
// record: the run's data, not the checkpoint, is wrong, so no older
// checkpoint is tried.
type tokenFileError struct{ error }

func tokenFileErrorf(format string, a ...any) error { return tokenFileError{fmt.Errorf(format, a...)} }

// removeOrphans deletes what interrupted writes left in the run directory:
// checkpoint directories that were never renamed into place
// (checkpoints/.tmp-*) and atomicfile's temporary files in the run
// directory, data/ and checkpoints/. Only a writer holding the lock calls
// it, so nothing is still writing them. It says what it removed.
func (s *Session) removeOrphans() {
	var n int
	var bytes int64
	for _, p := range orphans(s.dir) {
		size := treeSize(p)
		if err := os.RemoveAll(p); err != nil {
			fmt.Fprintf(s.log, "warning: could not remove %s, left by an interrupted write: %v\n", p, err)
			continue
		}
		n, bytes = n+1, bytes+size
	}
	if n > 0 {
		fmt.Fprintf(s.log, "removed %d leftover(s) of interrupted writes in %s (%s)\n", n, s.dir, humanBytes(int(bytes)))
	}
}

// orphans lists what interrupted writes left in the run directory dir:
// checkpoint directories never renamed into place or renamed out to be
// pruned (checkpoints/.tmp-*), and atomicfile's temporary files in dir,
// data/ and checkpoints/.
func orphans(dir string) []string {
	var out []string
	for _, sub := range []string{"", DataDir, CheckpointDir} {
		d := filepath.Join(dir, sub)
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			name := e.Name()
			if atomicfile.IsTemp(name) || sub == CheckpointDir && e.IsDir() && strings.HasPrefix(name, ".tmp-") {
				out = append(out, filepath.Join(d, name))
			}
		}
	}
	return out
}

// treeSize is the total size of the regular files under p.
func treeSize(p string) int64 {
	var n int64
	filepath.WalkDir(p, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// prune removes all but the newest checkpoints (always keeping latest).
func (s *Session) prune(latest string) {
	names := checkpointNames(filepath.Join(s.dir, CheckpointDir))
	kept := 0
	for i := len(names) - 1; i >= 0; i-- {
		if names[i] == latest || kept < keepCheckpoints-1 && names[i] < latest {
			if names[i] != latest {
				kept++
			}
			continue
		}
		// Renamed out of the checkpoints first: a kill during RemoveAll
		// must not leave a half-deleted step-N that looks like a damaged
		// checkpoint. What a kill leaves under the new name is an
		// orphan, removed at the next open.
		dir := filepath.Join(s.dir, CheckpointDir, names[i])
		doomed := filepath.Join(s.dir, CheckpointDir, ".tmp-pruned-"+names[i])
		if err := os.Rename(dir, doomed); err != nil {
			continue
		}
		os.RemoveAll(doomed)
	}
}

// checkpointNames lists the complete checkpoint directories, oldest first.
func checkpointNames(root string) []string {
	ents, _ := os.ReadDir(root)
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// candidates lists the checkpoints of the run in dir in the order to try
// them: the one `latest` names, then the others, newest first.
func candidates(dir string) []string {
	var tries []string
	if b, err := os.ReadFile(filepath.Join(dir, LatestFile)); err == nil {
		tries = append(tries, strings.TrimSpace(string(b)))
	}
	names := checkpointNames(filepath.Join(dir, CheckpointDir))
	for i := len(names) - 1; i >= 0; i-- {
		if !slices.Contains(tries, names[i]) {
			tries = append(tries, names[i])
		}
	}
	return tries
}

// loadLatest restores the checkpoint `latest` names, or, if it is missing
// or damaged, the newest one that loads.
func (s *Session) loadLatest() error {
	root := filepath.Join(s.dir, CheckpointDir)
	tries := candidates(s.dir)
	var errs []string
	for i, name := range tries {
		err := s.loadCheckpoint(filepath.Join(root, name))
		var tokErr tokenFileError
		var writeErr resumeWriteError
		if errors.As(err, &tokErr) || errors.As(err, &writeErr) {
			return err
		}
		if err == nil {
			if i > 0 {
				s.fellBack = fmt.Sprintf("checkpoint %s could not be used (%s); resumed from %s", tries[0], errs[0], name)
				fmt.Fprintf(s.log, "warning: %s\n", s.fellBack)
			}
			return nil
		}
		errs = append(errs, err.Error())
	}
	if len(tries) == 0 {
		return fmt.Errorf("train: %s has no checkpoint; the run was never saved (delete the directory to start again)", s.dir)
	}
	return fmt.Errorf("train: no checkpoint in %s loads: %s", root, strings.Join(errs, "; "))
}

func (s *Session) loadCheckpoint(dir string) error {
	st, err := readState(dir)
	if err != nil {
		return err
	}
	if err := loadCheckpoint(dir, s.model, s.trainer.Opt, &st); err != nil {
		return err
	}
	if err := s.checkTokenFiles(st.TokenFiles); err != nil {
		return err
	}
	if err := s.trainData.SetState(st.Loader); err != nil {
		return err
	}
	s.model.DropoutGenerator().SetState(st.Dropout)
	s.trainer.tokens = st.Tokens
	s.trainer.lrSet = st.LROverride
	if sc := s.trainer.scaler; sc != nil && st.LossScale > 0 {
		sc.scale, sc.good = st.LossScale, st.LossScaleGood
	}
	hist, err := readMetrics(filepath.Join(s.dir, MetricsFile), st.History)
	var damaged damagedLogError
	setAside := errors.As(err, &damaged)
	if setAside {
		// The log is a record, not state: the checkpoint alone resumes.
		hist, err = s.setAsideLog(&st, err)
	}
	if err != nil {
		return err
	}
	s.trainer.History.Steps = hist
	s.saved, s.savedRec = st.Step, len(hist)
	// Drop lines written after the checkpoint: the resumed run redoes them.
	// Only then is anything written, so reopening a run that stopped at a
	// checkpoint needs no space.
	if !setAside && !metricsBeyond(filepath.Join(s.dir, MetricsFile), len(hist)) {
		return s.openMetrics()
	}
	if err := s.rewriteMetrics(); err != nil {
		return resumeWriteError{fmt.Errorf("train: resuming %s at step %d: the checkpoint is intact, but dropping the metrics recorded after it failed: %v; free some space (or fix the directory's permissions) and open it again", s.dir, st.Step, err)}
	}
	return nil
}

// resumeWriteError is a failure to write while resuming from a checkpoint
// that loaded: no reason to try an older one.
type resumeWriteError struct{ error }

// metricsBeyond reports whether the metrics file holds more than n lines
// (records written after the checkpoint, or a torn last line).
func metricsBeyond(path string, n int) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		if lines++; lines > n {
			return true
		}
	}
	return sc.Err() != nil
}

// Train runs n steps (until ctx is cancelled, checked between steps),
// appending each record to metrics.jsonl, saving every Config.SaveEvery
// steps and when it stops. It returns the number of steps done.
func (s *Session) Train(ctx context.Context, n int, cbs ...Callback) (int, error) {
	return s.TrainWith(ctx, n, RunOptions{}, cbs...)
}

// TrainWith is Train with options (RunOptions).
func (s *Session) TrainWith(ctx context.Context, n int, opts RunOptions, cbs ...Callback) (int, error) {
	all := append([]Callback{s.record}, cbs...)
	from, start := s.trainer.StepCount(), time.Now()
	// A WSD run asked for more steps than its config has goes on at its
	// plateau and cools down at the new end (Trainer.Extend); the run
	// directory's config records the new length, so a resumed run has
	// the same schedule.
	if s.trainer.Extend(from + n) {
		s.config.Steps = s.trainer.Config.Steps
		if err := writeJSON(filepath.Join(s.dir, ConfigFile), s.config); err != nil {
			return 0, err
		}
	}
	done, err := s.trainer.RunWith(ctx, n, opts, all...)
	s.summarize(from, done, start, ctx.Err() != nil)
	// A diverged run keeps its last checkpoint: the steps since led there.
	// Unless nothing happened since the last save: a step skipped for a
	// non-finite gradient (float16's loss scaling) changes the state too.
	changed := s.trainer.StepCount() != s.saved || len(s.trainer.History.Steps) != s.savedRec
	if changed && !errors.Is(err, ErrDiverged) {
		if serr := s.Save(); err == nil {
			err = serr
		}
	}
	return done, err
}

func (s *Session) record(m Metrics) error {
	if err := s.appendMetrics(m); err != nil {
		return err
	}
	if every := s.config.SaveEvery; every > 0 && m.Step%every == 0 && m.Step != s.saved {
		return s.Save()
	}
	return nil
}

// Close saves nothing; it releases the token files, the metrics file and
// the run directory's lock.
func (s *Session) Close() error {
	var errs []error
	if s.metrics != nil {
		errs = append(errs, s.metrics.Close())
		s.metrics = nil
	}
	for _, l := range []*data.Loader{s.trainData, s.valData} {
		if l != nil {
			errs = append(errs, l.Close())
		}
	}
	s.trainData, s.valData = nil, nil
	errs = append(errs, s.lock.release())
	s.lock = nil
	return errors.Join(errs...)
}

func (s *Session) openMetrics() error {
	f, err := os.OpenFile(filepath.Join(s.dir, MetricsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("train: %v", err)
	}
	s.metrics = f
	return nil
}

func (s *Session) appendMetrics(m Metrics) error {
	b, _ := json.Marshal(m)
	_, err := s.metrics.Write(append(b, '\n'))
	return err
}

// writeMetricsFile writes the metrics file whole (a variable so that a
// test can make it fail as a full disk does).
var writeMetricsFile = writeFileAtomic

func (s *Session) rewriteMetrics() error {
	var buf bytes.Buffer
	for _, m := range s.trainer.History.Steps {
		b, _ := json.Marshal(m)
		buf.Write(append(b, '\n'))
	}
	if s.metrics != nil {
		s.metrics.Close()
		s.metrics = nil
	}
	if err := writeMetricsFile(filepath.Join(s.dir, MetricsFile), buf.Bytes()); err != nil {
		return err
	}
	return s.openMetrics()
}

// readMetrics returns the first n records of a metrics file. A torn last
// line (a crash mid-write) past the first n is ignored.
func readMetrics(path string, n int) ([]Metrics, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if n == 0 {
			return nil, nil
		}
		return nil, damagedLogError(fmt.Sprintf("%s is missing, the checkpoint needs %d records", path, n))
	}
	if err != nil {
		return nil, fmt.Errorf("train: %v", err)
	}
	defer f.Close()
	out := make([]Metrics, 0, n)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for len(out) < n && sc.Scan() {
		var m Metrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, damagedLogError(fmt.Sprintf("%s line %d: %v", path, len(out)+1, err))
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, damagedLogError(fmt.Sprintf("%s line %d: %v", path, len(out)+1, err))
	}
	if len(out) < n {
		return nil, damagedLogError(fmt.Sprintf("%s has %d records, the checkpoint needs %d (file truncated?)", path, len(out), n))
	}
	return out, nil
}

// damagedLogError is readMetrics' error for a metrics file that is there
// but does not hold the records a checkpoint needs.
type damagedLogError string

func (e damagedLogError) Error() string { return "train: " + string(e) }

// salvageMetrics reads what can be read of a damaged metrics file: the
// lines that parse, in order, whose steps rise and stay within maxStep,
// at most n of them.
func salvageMetrics(path string, n, maxStep int) []Metrics {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Metrics
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	last := 0
	for len(out) < n && sc.Scan() {
		var m Metrics
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Step > last && m.Step <= maxStep {
			out = append(out, m)
			last = m.Step
		}
	}
	return out
}

// setAsideLog moves a damaged metrics file to metrics.jsonl.damaged-<time>
// (nothing is deleted) and returns the history that could be salvaged
// from it, with a warning for the log.
func (s *Session) setAsideLog(st *State, why error) ([]Metrics, error) {
	path := filepath.Join(s.dir, MetricsFile)
	hist := salvageMetrics(path, st.History, st.Step)
	aside := path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
	if s.metrics != nil {
		s.metrics.Close()
		s.metrics = nil
	}
	what := "the log was set aside as " + aside + " and "
	if err := os.Rename(path, aside); errors.Is(err, os.ErrNotExist) {
		what = ""
	} else if err != nil {
		return nil, fmt.Errorf("%v; setting the damaged log aside failed too: %v", why, err)
	}
	fmt.Fprintf(s.log, "warning: %v; %sthe run resumes from its checkpoint at step %d with the %d of %d records that could be read\n",
		strings.TrimPrefix(why.Error(), "train: "), what, st.Step, len(hist), st.History)
	return hist, nil
}

// prepare trains the tokenizer on texts and writes the token files into
// dir, reusing an earlier preparation of the same text from the cache.
func prepare(texts []string, source string, cfg Config, dir string, log io.Writer, useCache bool) (tokenizer.Tokenizer, error) {
	return prepareWith(nil, texts, source, cfg, dir, log, useCache)
}

// prepareWith is prepare with the tokenizer given (tok != nil: a run
// started from a repository keeps the model's tokenizer; nothing is
// cached then) or trained (tok == nil).
func prepareWith(tok tokenizer.Tokenizer, texts []string, source string, cfg Config, dir string, log io.Writer, useCache bool) (tokenizer.Tokenizer, error) {
	useCache = useCache && tok == nil
	h := sha256.New()
	for _, t := range texts {
		fmt.Fprintf(h, "%d:", len(t))
		io.WriteString(h, t)
	}
	kind := fmt.Sprintf("bpe%d", cfg.Model.Vocab)
	if cfg.Tokenizer == "char" {
		kind = "char" // its vocabulary comes from the text
	}
	key := fmt.Sprintf("%s-%s-val%g", hex.EncodeToString(h.Sum(nil))[:16], kind, cfg.ValFraction)
	cache := ""
	if useCache {
		cache = cacheDir(key)
	}
	if cache != "" && data.VerifyManifest(cache) == nil {
		if tok, err := tokenizer.Load(filepath.Join(cache, TokenizerFile)); err == nil {
			if err := copyPrepared(cache, dir, cfg.Model.Context); err == nil {
				fmt.Fprintf(log, "using the prepared corpus in %s\n", cache)
				return tok, nil
			}
		}
	}
	size := 0
	for _, t := range texts {
		size += len(t)
	}
	start := time.Now()
	switch {
	case tok != nil:
	case cfg.Tokenizer == "char":
		tok = tokenizer.TrainChar(strings.Join(texts, ""))
	default:
		fmt.Fprintf(log, "training a %d-token BPE on %s of text…\n", cfg.Model.Vocab, humanBytes(size))
		bpe, err := tokenizer.TrainBPE(strings.Join(texts, ""), cfg.Model.Vocab, tokenizer.BPEOptions{})
		if err != nil {
			return nil, err
		}
		tok = bpe
		fmt.Fprintf(log, "tokenizer trained in %.1fs\n", time.Since(start).Seconds())
	}
	res, err := data.Prepare(texts, tok, dir, data.PrepareOptions{ValFraction: cfg.ValFraction, Context: cfg.Model.Context, Parallel: true})
	if err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "source.json"), map[string]any{
		"source": source, "bytes": size, "train_tokens": res.TrainTokens, "val_tokens": res.ValTokens,
		"tokenizer": tok.Kind(), "vocab": tok.VocabSize(),
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "corpus: %s → %d training and %d validation tokens (%.2f bytes/token)\n",
		humanBytes(size), res.TrainTokens, res.ValTokens, float64(size)/float64(max(1, res.Tokens())))
	if cache != "" {
		// Best effort: a cache that cannot be written only costs time.
		// The manifest, written last, marks the set complete.
		if err := os.MkdirAll(cache, 0o755); err == nil && data.RemoveManifest(cache) == nil {
			ok := tok.Save(filepath.Join(cache, TokenizerFile)) == nil
			for _, f := range []string{data.TrainFile, data.ValFile, "source.json"} {
				ok = ok && copyFile(filepath.Join(dir, f), filepath.Join(cache, f)) == nil
			}
			if ok {
				_ = data.WriteManifest(cache, TokenizerFile, data.TrainFile, data.ValFile, "source.json")
			}
		}
	}
	return tok, nil
}

// usePrepared copies the token files of a `forge prepare` directory into
// the run, checking that they fit the config.
func usePrepared(src, dst string, cfg *Config) (tokenizer.Tokenizer, error) {
	tok, err := tokenizer.Load(filepath.Join(src, TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("train: %s is not a prepared data directory (run `forge prepare --out %s …` first): %w", src, src, err)
	}
	if err := data.VerifyManifest(src); err != nil {
		return nil, err
	}
	cfg.Tokenizer = tok.Kind()
	if tok.Kind() == "bpe" && tok.VocabSize() > cfg.Model.Vocab {
		return nil, fmt.Errorf("train: %s: the tokenizer has %d tokens but the model's vocabulary is %d; set \"vocab\" to at least %d in the config or prepare with --vocab %d",
			src, tok.VocabSize(), cfg.Model.Vocab, tok.VocabSize(), cfg.Model.Vocab)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Join(src, "train")); err == nil && fi.IsDir() {
		return tok, linkShards(src, dst, cfg.Model.Context, tok)
	}
	for _, f := range []string{data.TrainFile, data.ValFile} {
		toks, err := data.ReadTokens(filepath.Join(src, f))
		if err != nil {
			return nil, err
		}
		if len(toks) < cfg.Model.Context+1 {
			return nil, fmt.Errorf("train: %s has %d tokens, too few for context %d; prepare more text or use a smaller context", filepath.Join(src, f), len(toks), cfg.Model.Context)
		}
		for i, id := range toks {
			if int(id) >= tok.VocabSize() {
				return nil, fmt.Errorf("train: %s: token %d at %d is outside its tokenizer's %d ids (prepared with another tokenizer?)", filepath.Join(src, f), id, i, tok.VocabSize())
			}
		}
		if err := copyFile(filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
			return nil, err
		}
	}
	if err := writeJSON(filepath.Join(dst, "source.json"), map[string]any{"source": src, "tokenizer": tok.Kind(), "vocab": tok.VocabSize()}); err != nil {
		return nil, err
	}
	return tok, nil
}

// linkShards puts the shards of a streamed `forge prepare` directory
// (train/ and val/, checked by its manifest) into the run: hard links
// where the file system allows (no copy of a corpus larger than memory),
// else copies. Each shard must hold a window of context+1 tokens.
func linkShards(src, dst string, context int, tok tokenizer.Tokenizer) error {
	for _, split := range []string{"train", "val"} {
		l, err := data.OpenLoader(filepath.Join(src, split), 1, context, 0)
		if err != nil {
			return fmt.Errorf("train: %w", err)
		}
		l.Close()
		files, err := data.ShardFiles(filepath.Join(src, split))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, split), 0o755); err != nil {
			return fmt.Errorf("train: %v", err)
		}
		for _, f := range files {
			to := filepath.Join(dst, split, filepath.Base(f))
			os.Remove(to)
			if err := os.Link(f, to); err != nil {
				if err := copyStream(f, to); err != nil {
					return fmt.Errorf("train: copying %s into the run: %v", f, err)
				}
			}
		}
		atomicfile.SyncDir(filepath.Join(dst, split))
	}
	return writeJSON(filepath.Join(dst, "source.json"), map[string]any{"source": src, "tokenizer": tok.Kind(), "vocab": tok.VocabSize(), "shards": true})
}

// copyStream copies src to dst through a synced temporary file, without
// holding the file in memory.
func copyStream(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// cacheDir is where prepared corpora are kept: $FORGE_CACHE_DIR or the
// user's cache directory + forge/prepared ("" if there is none).
func cacheDir(key string) string {
	root := os.Getenv("FORGE_CACHE_DIR")
	if root == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		root = filepath.Join(c, "forge")
	}
	return filepath.Join(root, "prepared", key)
}

func copyPrepared(cache, dir string, context int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{data.TrainFile, data.ValFile} {
		toks, err := data.ReadTokens(filepath.Join(cache, f))
		if err != nil || len(toks) < context+1 {
			return fmt.Errorf("cached %s unusable", f)
		}
	}
	for _, f := range []string{data.TrainFile, data.ValFile, "source.json"} {
		if err := copyFile(filepath.Join(cache, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeFileAtomic(dst, b)
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Snapshot is a run's model at its latest checkpoint, loaded for use
// (generation, evaluation, export) without opening it for training.
type Snapshot struct {
	Dir       string
	Config    Config
	Tokenizer tokenizer.Tokenizer
	Model     *gpt.Model
	Step      int
	State     State
	// Revision is the .forge revision loaded (LoadRepository), "" for a run.
	Revision string
	// Mapped is how many of the model's parameters are the repository's
	// mapped file itself, read-only (MapRepository); 0 for copies.
	Mapped int
	// FellBack says why the checkpoint `latest` names could not be used
	// and which one was loaded instead ("" when it was used). Callers
	// must show it: the model is older than the run.
	FellBack string
}

// Load reads the run in dir at its latest loadable checkpoint. It writes
// nothing and takes no lock: it reads while a writer trains. When the
// checkpoint `latest` names is damaged it loads the newest one that is
// not and says so in Snapshot.FellBack.
func Load(dir string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("train: %s is not a run directory (no %s); train one first with `forge train --run %s`", dir, ConfigFile, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("train: %v", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("train: %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, TokenizerFile))
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckWeightMemory(); err != nil {
		return nil, err
	}
	m, err := gpt.NewEmpty(cfg.Model, cfg.Seed) // LoadWeights fills every weight
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, CheckpointDir)
	tries := candidates(dir)
	var errs []string
	for i, name := range tries {
		cdir := filepath.Join(root, name)
		st, err := readState(cdir)
		if err == nil {
			err = verifyFiles(cdir, &st)
		}
		if err == nil {
			err = LoadWeights(filepath.Join(cdir, modelFile), m)
		}
		if err == nil {
			m.SetTraining(false)
			snap := &Snapshot{Dir: dir, Config: cfg, Tokenizer: tok, Model: m, Step: st.Step, State: st}
			if i > 0 {
				snap.FellBack = fmt.Sprintf("checkpoint %s could not be used (%s); loaded %s, step %d", filepath.Join(root, tries[0]), errs[0], name, st.Step)
			}
			return snap, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("train: no checkpoint in %s loads: %s", root, strings.Join(errs, "; "))
}

func readState(dir string) (State, error) {
	path := filepath.Join(dir, stateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return State{}, err
	}
	st, err := ParseState(b)
	if err != nil {
		return st, fmt.Errorf("%s: %v", path, err)
	}
	return st, nil
}

// ParseState reads a checkpoint's state.json, checking its format,
// version and that its numbers make sense.
func ParseState(b []byte) (State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, err
	}
	switch {
	case st.Format != stateFormat || st.Version != stateVersion:
		return State{}, fmt.Errorf("not a forge run state (format %q version %d; want %q version %d)", st.Format, st.Version, stateFormat, stateVersion)
	case st.Step < 0 || st.History < 0 || st.Tokens < 0:
		return State{}, fmt.Errorf("negative step %d, history %d or tokens %d", st.Step, st.History, st.Tokens)
	case st.LossScale < 0 || math.IsInf(st.LossScale, 0) || st.LossScaleGood < 0:
		return State{}, fmt.Errorf("loss scale %g with %d good steps: want a positive scale", st.LossScale, st.LossScaleGood)
	case st.Files[modelFile] == "" || st.Files[optimFile] == "":
		return State{}, fmt.Errorf("no checksums for %s and %s", modelFile, optimFile)
	}
	return st, nil
}

// UseData sets the data of a new run from command-line arguments: one
// directory is a `forge prepare` output (Prepared); otherwise the paths are
// text files, read into Texts (an empty or unreadable one is an error) and
// named in Source. No paths leave the options unchanged (the built-in
// corpus).
func (o *OpenOptions) UseData(paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			if len(paths) > 1 {
				return fmt.Errorf("%s is a directory: a prepared corpus (forge prepare) must be the only --data", p)
			}
			o.Prepared = p
			return nil
		}
	}
	texts, err := data.ReadTexts(paths)
	if err != nil {
		return err
	}
	o.Texts, o.Source = texts, strings.Join(paths, ",")
	return nil
}
