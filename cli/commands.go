package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/dataset"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
	"github.com/forgeml/forge/internal/termplot"
)

// interruptContext returns a context cancelled by Ctrl-C (SIGINT) or by
// e.interrupt; a second Ctrl-C is left to the default handler (exit).
func (e *env) interruptContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := e.interrupt
	var own chan os.Signal
	if ch == nil {
		own = make(chan os.Signal, 1)
		signal.Notify(own, os.Interrupt)
		ch = own
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			cancel()
			if own != nil {
				signal.Stop(own) // the next Ctrl-C ends the process
			}
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		if own != nil {
			signal.Stop(own)
		}
		cancel()
	}
}

func cmdTrain(e *env, args []string) error {
	fs := flags(e, "train")
	config := fs.String("config", "tiny", "config name ("+strings.Join(configNames(), ", ")+") or a .json file")
	runDir := fs.String("run", "", "run directory (default runs/<config name>); resumed if it exists")
	steps := fs.Int("steps", 0, "steps to train now (default: up to the config's steps)")
	tok := fs.String("tokenizer", "", "bpe or char (default: the config's)")
	quiet := fs.Bool("quiet", false, "no progress, only the summary")
	device := deviceFlag(fs)
	var dataFiles multiFlag
	fs.Var(&dataFiles, "data", "a text file to train on (repeatable), or a directory from forge prepare (default: the built-in Jane Austen corpus)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *steps < 0 {
		return usagef("--steps %d: want a number of steps >= 1 (or 0: up to the config's steps)", *steps)
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	dataFiles = append(dataFiles, pos...)
	dir := *runDir
	if dir == "" {
		if dir, err = train.DefaultRunDir(*config); err != nil {
			return err
		}
	}
	opts := train.OpenOptions{DefaultConfigName: *config, Tokenizer: *tok, Log: e.stderr, Data: dataFiles}
	if flagSet(fs, "config") {
		opts.ConfigName = *config
	}
	if *quiet {
		opts.Log = nil
	}
	s, err := train.Open(dir, opts)
	if errors.Is(err, train.ErrRunHasData) {
		return usageError{strings.TrimPrefix(err.Error(), "train: ")}
	}
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.Config()
	n := *steps
	if n == 0 {
		n = cfg.Steps - s.Trainer().StepCount()
		if n <= 0 {
			fmt.Fprintf(e.stdout, "%s has done its %d steps; pass --steps to train further\n", dir, cfg.Steps)
			return nil
		}
	}
	verb := "training"
	if s.Resumed() {
		verb = fmt.Sprintf("resuming at step %d,", s.Trainer().StepCount())
	}
	with := ""
	if cfg.OptimizerName() != "adamw" {
		with = " with " + cfg.OptimizerName() // AdamW, the default, goes unsaid
	}
	fmt.Fprintf(e.stderr, "%s %s (%s parameters) for %d steps%s in %s; Ctrl-C stops and saves\n",
		verb, cfg.Name, numfmt.Thousands(nn.Count(s.Model())), n, with, dir)
	ctx, stop := e.interruptContext()
	defer stop()
	p := newProgress(e.stderr, n, *quiet)
	_, err = s.Train(ctx, n, p.update)
	p.finish()
	if err != nil {
		return err
	}
	sum := s.LastRun()
	if sum.Steps() == 0 {
		fmt.Fprintf(e.stdout, "stopped before the first step; %s is unchanged\n", dir)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", cfg.Name, sum)
	if h := s.Trainer().History.Steps; len(h) > 1 {
		losses := make([]float64, len(h))
		for i, m := range h {
			losses[i] = m.Loss
		}
		fmt.Fprintf(e.stdout, "loss over steps 1→%d: %s\n", h[len(h)-1].Step, termplot.Sparkline(losses, 60))
	}
	if sum.Interrupted {
		fmt.Fprintf(e.stdout, "interrupted at step %d; ", sum.To)
	}
	fmt.Fprintf(e.stdout, "saved %s (resume: forge train --run %s; sample: forge generate --run %s)\n", dir, dir, dir)
	return nil
}

func cmdGenerate(e *env, args []string) error {
	fs := flags(e, "generate")
	runDir := fs.String("run", "runs/tiny", "run directory or .forge repository")
	rev := fs.String("rev", "", "revision of a .forge repository (HEAD, HEAD~N or a hash prefix)")
	prompt := fs.String("prompt", "", "text to continue (default: a newline)")
	n := fs.Int("n", 200, "tokens to generate")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 40, "sample among the k most likely tokens (0 = all)")
	topP := fs.Float64("top-p", 0.95, "nucleus sampling threshold (1 = off)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	noCache := fs.Bool("no-cache", false, "recompute the context for every token (no KV cache)")
	device := deviceFlag(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *n < 0 {
		return usagef("-n %d: want a number of tokens >= 0", *n)
	}
	if !(*temp >= 0) || math.IsInf(*temp, 0) {
		return usagef("--temperature %v: want a finite number >= 0 (0 = greedy)", *temp)
	}
	if *topK < 0 {
		return usagef("--top-k %d: want a number of tokens >= 0 (0 = all)", *topK)
	}
	if !(*topP > 0 && *topP <= 1) {
		return usagef("--top-p %v: want a probability in (0, 1] (1 = off)", *topP)
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	snap, err := loadRun(e, *runDir, *rev)
	if err != nil {
		return err
	}
	text := *prompt
	if text == "" {
		text = "\n"
	}
	ids := snap.Tokenizer.Encode(text)
	fmt.Fprint(e.stdout, *prompt)
	start := time.Now()
	out, err := snap.Model.Generate(ids, gpt.GenerateOptions{
		MaxTokens: *n, Sampling: gpt.Sampling{Temperature: *temp, TopK: *topK, TopP: *topP},
		Seed: *seed, NoCache: *noCache,
		OnToken: func(id int) bool {
			// Decoding concatenates, so each token's bytes go out as they
			// come (a character split across tokens completes with the next).
			fmt.Fprint(e.stdout, snap.Tokenizer.Decode([]int{id}))
			return true
		},
	})
	fmt.Fprintln(e.stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d tokens in %s (%.0f tokens/s), step %d of %s\n", len(out), time.Since(start).Round(time.Millisecond),
		float64(len(out))/time.Since(start).Seconds(), snap.Step, *runDir)
	return nil
}

func cmdEval(e *env, args []string) error {
	fs := flags(e, "eval")
	runDir := fs.String("run", "runs/tiny", "run directory or .forge repository")
	rev := fs.String("rev", "", "revision of a .forge repository (HEAD, HEAD~N or a hash prefix)")
	valFile := fs.String("data", "", "validation token file (default: the run's; required for a .forge repository)")
	batches := fs.Int("batches", 0, "validation batches (0 = the whole validation file)")
	device := deviceFlag(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *batches < 0 {
		return usagef("--batches %d: want a number of batches >= 1 (or 0: the whole validation file)", *batches)
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	if *valFile == "" && train.IsRepository(*runDir) {
		return usagef("%s is a .forge repository, which keeps no data: give the validation tokens with --data val.bin (forge prepare writes one)", *runDir)
	}
	snap, err := loadRun(e, *runDir, *rev)
	if err != nil {
		return err
	}
	cfg := snap.Config
	if *valFile == "" {
		*valFile = train.ValData(*runDir)
	}
	val, err := data.OpenLoader(*valFile, cfg.Batch, cfg.Model.Context, 0)
	if err != nil {
		return err
	}
	defer val.Close()
	var xs, ys [][]int32
	for x, y := range val.Eval(*batches) {
		xs, ys = append(xs, x), append(ys, y)
	}
	start := time.Now()
	loss, err := train.Evaluate(snap.Model, cfg.Model.Context, xs, ys)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s step %d: validation loss %.4f, perplexity %.2f (%s)\n", *runDir, snap.Step, loss, math.Exp(loss), time.Since(start).Round(time.Millisecond))
	return nil
}

func cmdInfo(e *env, args []string) error {
	fs := flags(e, "info")
	config := fs.String("config", "", "config name or .json file")
	runDir := fs.String("run", "", "run directory (instead of --config)")
	params := fs.Bool("params", false, "list every parameter")
	device := deviceFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	if *config == "" && *runDir == "" && len(pos) == 1 {
		*config = pos[0]
	}
	var cfg train.Config
	switch {
	case *runDir != "":
		snap, err := loadRun(e, *runDir, "")
		if err != nil {
			return err
		}
		cfg = snap.Config
		if snap.Revision != "" {
			fmt.Fprintf(e.stdout, "repository %s at revision %s (step %d)\n", *runDir, snap.Revision[:12], snap.Step)
		} else {
			fmt.Fprintf(e.stdout, "run %s at step %d\n", *runDir, snap.Step)
		}
		if r, err := train.Check(*runDir); err == nil && snap.Revision == "" {
			fmt.Fprintf(e.stdout, "  check: %s (details: forge check --run %s)\n", r.Summary(), *runDir)
		}
	case *config != "":
		if cfg, err = train.LoadConfig(*config); err != nil {
			return err
		}
	default:
		fmt.Fprintf(e.stdout, "configs: %s\n", strings.Join(configNames(), ", "))
		for _, name := range configNames() {
			c, err := train.LoadConfig(name)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "  %-10s %7.1f M parameters  %6.1f MFLOP/token  context %4d  %s\n", name,
				float64(c.Model.Params())/1e6, float64(c.Model.FLOPsPerToken())/1e6, c.Model.Context, describe(c.Model))
		}
		printDevice(e)
		return nil
	}
	m := cfg.Model.Resolved()
	fmt.Fprintf(e.stdout, "%s: %s\n", cfg.Name, describe(m))
	fmt.Fprintf(e.stdout, "  vocab %d (padded to %d), context %d, d_model %d, %d layers, %d heads (%d kv, head dim %d), MLP hidden %d\n",
		m.Vocab, m.PaddedVocab(), m.Context, m.Dim, m.Layers, m.Heads, m.KVHeads, m.HeadDim(), m.FFNHidden)
	total := m.Params()
	emb := m.PaddedVocab() * m.Dim
	fmt.Fprintf(e.stdout, "  parameters: %s (embedding %s, the rest %s)\n", numfmt.Thousands(total), numfmt.Thousands(emb), numfmt.Thousands(total-emb))
	if m.MoE() {
		fmt.Fprintf(e.stdout, "  mixture of experts: %d experts per block, top-%d per token, aux coef %g; %s parameters active per token\n",
			m.Experts, m.TopK, m.MoEAuxCoef, numfmt.Thousands(m.ActiveParams()))
	}
	fpt := m.FLOPsPerToken()
	fmt.Fprintf(e.stdout, "  training FLOPs: %.1f M per token, %.2f G per step of %d tokens (batch %d × context %d × accumulation %d)\n",
		float64(fpt)/1e6, float64(fpt)*float64(cfg.TokensPerStep())/1e9, cfg.TokensPerStep(), cfg.Batch, m.Context, cfg.GradAccum)
	avail := "unknown here"
	if n, ok := train.AvailableMemory(); ok {
		avail = numfmt.Bytes(float64(n))
	}
	fmt.Fprintf(e.stdout, "  memory to train: at least %s; available now %s\n", cfg.MemoryNeeded(), avail)
	fmt.Fprintf(e.stdout, "  schedule: %s, lr %g, warmup %d, %d steps, clip %g\n",
		cfg.Schedule, cfg.LR, cfg.Warmup, cfg.Steps, cfg.GradClip)
	fmt.Fprintf(e.stdout, "  optimizer: %s\n", cfg.OptimizerSummary())
	if *params {
		if err := cfg.CheckWeightMemory(); err != nil {
			return err
		}
		mod, err := gpt.New(cfg.Model, cfg.Seed)
		if err != nil {
			return err
		}
		fmt.Fprint(e.stdout, nn.Summarize(mod))
	}
	printDevice(e)
	return nil
}

func describe(c gpt.Config) string {
	c = c.Resolved()
	attn := "MHA"
	if c.KVHeads < c.Heads {
		attn = fmt.Sprintf("GQA %d:%d", c.Heads, c.KVHeads)
	}
	tied := "tied"
	if c.Untied {
		tied = "untied"
	}
	mlp := c.MLP
	if c.MoE() {
		mlp = fmt.Sprintf("%s × %d experts top-%d", c.MLP, c.Experts, c.TopK)
	}
	s := fmt.Sprintf("%s, %s, %s, %s, %s head", c.Norm, mlp, c.Position, attn, tied)
	if c.Quant != "" && c.Quant != forge.QuantNone {
		s += ", " + c.Quant + " QAT"
	}
	switch {
	case c.Checkpoint.All():
		s += ", every block checkpointed"
	case !c.Checkpoint.IsZero():
		s += ", blocks " + c.Checkpoint.String() + " checkpointed"
	}
	return s
}

func cmdPrepare(e *env, args []string) error {
	fs := flags(e, "prepare")
	out := fs.String("out", "", "output directory for tokenizer.json, train.bin, val.bin (required)")
	vocab := fs.Int("vocab", 4096, "BPE vocabulary size")
	kind := fs.String("tokenizer", "bpe", "bpe or char")
	tokPath := fs.String("use-tokenizer", "", "an existing tokenizer.json to encode with (instead of training one)")
	valFrac := fs.Float64("val", 0.1, "fraction of tokens held out for validation")
	context := fs.Int("context", 256, "the context the files must fit (each split gets at least context+1 tokens)")
	var sources multiFlag
	fs.Var(&sources, "data", "a source to stream (repeatable): file, directory, glob, .jsonl, .parquet or hf:org/name[/config][@split], optionally :weight")
	mixSpec := fs.String("mix", "", "presets to stream, with weights: fineweb-edu:0.6,dclm:0.4 (see --help)")
	field := fs.String("field", "text", "the text field of JSON Lines, Parquet and hub sources")
	shardTokens := fs.Int("shard-tokens", dataset.DefaultShardTokens, "tokens per shard file when streaming")
	sample := fs.String("sample", "64MB", "text the tokenizer trains on when streaming (KB, MB, GB; KiB, MiB, GiB)")
	maxBytes := fs.String("max-bytes", "", "stop streaming after this much text (KB, MB, GB; KiB, MiB, GiB; default: until a source runs out)")
	chunk := fs.String("chunk", "1MB", "text encoded as one unit when streaming (every 1/val-th chunk is held out)")
	files, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		srcs, mixes := dataset.Presets()
		fmt.Fprintf(e.stderr, prepareExamples, strings.Join(srcs, ", "), strings.Join(mixes, ", "))
	}
	if err != nil {
		return err
	}
	if len(sources) > 0 || *mixSpec != "" {
		return prepareStream(e, *out, sources, files, *mixSpec, *field, *kind, *vocab, *tokPath, *valFrac, *context, *shardTokens, *sample, *maxBytes, *chunk)
	}
	if *out == "" {
		return usagef("--out is required: the directory to write the token files to")
	}
	if *kind != "bpe" && *kind != "char" {
		return usagef("--tokenizer %q: want bpe or char", *kind)
	}
	if *vocab < 256 || *vocab > tokenizer.MaxVocabSize {
		return usagef("--vocab %d: want a BPE vocabulary of 256 (the byte tokens) to %d", *vocab, tokenizer.MaxVocabSize)
	}
	if !(*valFrac > 0 && *valFrac < 1) {
		return usagef("--val %v: want the fraction of tokens held out, between 0 and 1 (exclusive)", *valFrac)
	}
	if *context < 1 {
		return usagef("--context %d: want a context of at least 1 token", *context)
	}
	texts, err := data.ReadTexts(files)
	if err != nil {
		return err
	}
	if texts == nil {
		texts = []string{data.Austen()}
		fmt.Fprintln(e.stderr, "no files given: preparing the built-in Jane Austen corpus")
	}
	var tok tokenizer.Tokenizer
	start := time.Now()
	switch {
	case *tokPath != "":
		tok, err = tokenizer.Load(*tokPath)
	case *kind == "char":
		tok = tokenizer.TrainChar(strings.Join(texts, ""))
	default:
		fmt.Fprintf(e.stderr, "training a %d-token BPE…\n", *vocab)
		var bpe *tokenizer.BPE
		bpe, err = tokenizer.TrainBPE(strings.Join(texts, ""), *vocab, tokenizer.BPEOptions{})
		tok = bpe
		if err == nil && bpe.VocabSize() < *vocab {
			fmt.Fprintf(e.stderr, "note: the corpus gave only %d merges, so the tokenizer has %d tokens, not the %d asked for (every chunk of the text is one token already)\n",
				bpe.VocabSize()-256, bpe.VocabSize(), *vocab)
		}
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	// The set (tokenizer and token files) counts once its manifest is
	// written, last; until then an older set there no longer does.
	if err := data.RemoveManifest(*out); err != nil {
		return err
	}
	// Shards of an earlier streamed set would be taken for this set's.
	for _, d := range []string{dataset.TrainDir, dataset.ValDir} {
		if err := os.RemoveAll(filepath.Join(*out, d)); err != nil {
			return err
		}
	}
	if err := tok.Save(filepath.Join(*out, "tokenizer.json")); err != nil {
		return err
	}
	res, err := data.Prepare(texts, tok, *out, data.PrepareOptions{ValFraction: *valFrac, Context: *context, Parallel: true,
		Progress: func(done, total int) {
			fmt.Fprintf(e.stderr, "\rencoding %3.0f%%", 100*float64(done)/float64(max(total, 1)))
		}})
	fmt.Fprintln(e.stderr)
	if err != nil {
		return err
	}
	if err := data.WriteManifest(*out, "tokenizer.json", data.TrainFile, data.ValFile); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: %d-token %s tokenizer, %d training and %d validation tokens (%.2f bytes/token) in %s\n",
		*out, tok.VocabSize(), tok.Kind(), res.TrainTokens, res.ValTokens, float64(res.TextBytes)/float64(max(1, res.Tokens())), time.Since(start).Round(time.Millisecond))
	return nil
}

const prepareExamples = `
Files given as arguments are read whole (small corpora: train.bin, val.bin). Sources given
with --data or --mix are streamed in chunks on every core into shards (train/, val/), in
bounded memory, the tokenizer trained on the first --sample of the mixture:

  forge prepare --out data/austen emma.txt persuasion.txt           # one-shot, as before
  forge prepare --out data/books --data 'books/*.txt'                # text files (a glob or a directory)
  forge prepare --out data/chat --data chats.jsonl --field content   # JSON Lines, the text in "content"
  forge prepare --out data/web --data part-0000.parquet --data part-0001.parquet   # Parquet, column "text"
  forge prepare --out data/stories --data hf:roneneldan/TinyStories --max-bytes 200MB
                                                                     # a Hugging Face dataset (its Parquet files)
  forge prepare --out data/wiki --data hf:wikimedia/wikipedia/20231101.en@train --max-bytes 1GB
  forge prepare --out data/mix --data web.parquet:0.7 --data books/:0.3 --shard-tokens 50000000
  forge prepare --out data/edu --mix fineweb-edu:0.6,dclm:0.4 --max-bytes 2GB --vocab 16384
  forge train --config small --data data/mix                         # train on the shards

A weight follows a source after a colon; the mixture takes bytes from each source in
proportion and ends when one runs out, and the report says how many tokens each gave.
Hub datasets are read from a local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub,
~/.cache/huggingface/hub) when it holds them, else downloaded (resumable) into the
forge cache with the token in HF_TOKEN or ~/.cache/huggingface/token; HF_ENDPOINT
changes the hub, HF_HUB_OFFLINE=1 forbids the network.
Presets for --mix: %s; mixtures: %s.
`

// prepareStream is forge prepare over --data and --mix sources: streamed,
// mixed by weight, written as shards.
func prepareStream(e *env, out string, specs, files []string, mixSpec, field, kind string, vocab int, tokPath string, valFrac float64, context, shardTokens int, sample, maxBytes, chunk string) error {
	if out == "" {
		return usagef("--out is required: the directory to write the shards to")
	}
	if len(files) > 0 {
		return usagef("give the sources with --data when streaming (got %s as well)", strings.Join(files, " "))
	}
	sampleN, err := parseBytes("--sample", sample)
	if err != nil {
		return err
	}
	chunkN, err := parseBytes("--chunk", chunk)
	if err != nil {
		return err
	}
	var maxN int64
	if maxBytes != "" {
		if maxN, err = parseBytes("--max-bytes", maxBytes); err != nil {
			return err
		}
	}
	var srcs []*dataset.Source
	for _, spec := range specs {
		s, err := dataset.ParseSource(spec, field)
		if err != nil {
			return err
		}
		srcs = append(srcs, s)
	}
	if mixSpec != "" {
		m, err := dataset.ParseMix(mixSpec)
		if err != nil {
			return err
		}
		srcs = append(srcs, m...)
	}
	opts := dataset.Options{Kind: kind, Vocab: vocab, SampleBytes: sampleN, ShardTokens: shardTokens, ValFraction: valFrac,
		Context: context, MaxBytes: maxN, ChunkBytes: int(chunkN)}
	if tokPath != "" {
		if opts.Tokenizer, err = tokenizer.Load(tokPath); err != nil {
			return err
		}
	}
	hub := dataset.DefaultHub()
	hub.Log = e.stderr
	for _, s := range srcs {
		s.SetHub(hub)
	}
	opts.Progress = func(p dataset.Progress) {
		if p.Phase == "sample" {
			fmt.Fprintf(e.stderr, "training a %d-token %s tokenizer on a %s sample…\n", vocab, kind, numfmt.Bytes(float64(p.Bytes)))
			return
		}
		sec := max(p.Elapsed.Seconds(), 1e-9)
		eta := ""
		if d := p.ETA(); d > 0 {
			eta = ", ETA " + d.Round(time.Second).String()
		}
		fmt.Fprintf(e.stderr, "\rencoding %s (%s/s), %s tokens (%s/s), %d+%d shards%s   ", numfmt.Bytes(float64(p.Bytes)), numfmt.Bytes(float64(p.Bytes)/sec),
			numfmt.Thousands(int(p.Tokens)), numfmt.Thousands(int(float64(p.Tokens)/sec)), p.ShardsTrain, p.ShardsVal, eta)
		if p.Done {
			fmt.Fprintln(e.stderr)
		}
	}
	ctx, stop := e.interruptContext()
	defer stop()
	rep, err := dataset.Prepare(ctx, srcs, out, opts)
	if err != nil {
		return err
	}
	for _, s := range rep.Sources {
		share := float64(s.Tokens) / float64(max(1, rep.TrainTokens+rep.ValTokens))
		lic := ""
		if s.Licence != "" {
			lic = ", " + s.Licence
		}
		fmt.Fprintf(e.stdout, "  %-28s weight %.2f → %5.1f%% of the tokens: %s documents, %s, %s tokens%s\n", s.Name, s.Share, 100*share,
			numfmt.Thousands(int(s.Documents)), numfmt.Bytes(float64(s.Bytes)), numfmt.Thousands(int(s.Tokens)), lic)
	}
	if rep.Exhausted != "" {
		fmt.Fprintf(e.stdout, "  the mixture ended when %s ran out (so that the weights hold)\n", rep.Exhausted)
	}
	fmt.Fprintf(e.stdout, "%s: %d-token %s tokenizer, %s training tokens in %d shard(s) and %s validation tokens in %d, from %s of text (%.2f bytes/token) in %.1fs; train with forge train --data %s\n",
		out, rep.Vocab, rep.Tokenizer, numfmt.Thousands(int(rep.TrainTokens)), rep.TrainShards, numfmt.Thousands(int(rep.ValTokens)), rep.ValShards,
		numfmt.Bytes(float64(rep.Bytes)), float64(rep.Bytes)/float64(max(1, rep.TrainTokens+rep.ValTokens)), rep.Seconds, out)
	return nil
}

// parseBytes reads a flag's size (numfmt.ParseBytes: 64MB, 512MiB, 2G).
func parseBytes(flag, s string) (int64, error) {
	n, err := numfmt.ParseBytes(s)
	if err != nil {
		return 0, usagef("%s %q: %v", flag, s, err)
	}
	return n, nil
}

func cmdExport(e *env, args []string) error {
	fs := flags(e, "export")
	runDir := fs.String("run", "runs/tiny", "run directory")
	out := fs.String("out", "", "output directory, or the .forge repository to commit to (required)")
	format := fs.String("format", "hf", "hf: Hugging Face / PyTorch files; forge: a new revision of a .forge repository")
	dtype := fs.String("dtype", "float32", "--format forge: stored dtype, float32 (loads without conversion), float16 or bfloat16")
	message := fs.String("message", "", "--format forge: the revision's message (default: the step)")
	older := fs.Bool("allow-older", false, "export an older checkpoint when the latest is damaged")
	quant := fs.Bool("quant", false, "write the block weights quantised (int8 levels and per-row scales, or 2-bit packed ternary) in the run's quant mode; train.LoadQuantized loads it")
	quantMode := fs.String("quant-mode", "", "with --quant: int8 or ternary instead of the run's own mode (quantise after training)")
	device := deviceFlag(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required: the directory to write the exported model to")
	}
	if *format != "hf" && *format != "forge" {
		return usagef("--format %q: want hf (Hugging Face files) or forge (a .forge repository)", *format)
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	if *format == "hf" && (flagSet(fs, "dtype") || flagSet(fs, "message")) {
		return usagef("--dtype and --message belong to --format forge; the Hugging Face export is float32")
	}
	snap, err := openModel(*runDir, "")
	if err != nil {
		return err
	}
	if snap.FellBack != "" {
		if !*older {
			return fmt.Errorf("%s; not exporting an older model than the run's latest: pass --allow-older to export step %d", snap.FellBack, snap.Step)
		}
		fmt.Fprintf(e.stderr, "warning: %s\n", snap.FellBack)
	}
	if *quantMode != "" && !*quant {
		return usagef("--quant-mode needs --quant")
	}
	if *quant && *format == "forge" {
		return usagef("--quant writes its own format; a .forge repository keeps the float weights (--dtype for 16 bits)")
	}
	if *format == "forge" {
		return exportForge(e, snap, *runDir, *out, *dtype, *message)
	}
	if *quant {
		mode := *quantMode
		if mode == "" {
			mode = snap.Model.Config.Quant
		}
		if err := train.ExportQuantized(snap.Model, snap.Tokenizer, *out, mode); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "exported step %d of %s to %s with %s block weights (see %s)\n", snap.Step, *runDir, *out, mode, filepath.Join(*out, "README.md"))
		return nil
	}
	fam, err := train.Export(snap.Model, snap.Tokenizer, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "exported step %d of %s to %s as a transformers %s model (see %s)\n", snap.Step, *runDir, *out, fam, filepath.Join(*out, "README.md"))
	return nil
}

func cmdCheck(e *env, args []string) error {
	fs := flags(e, "check")
	runDir := fs.String("run", "runs/tiny", "run directory")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 1 && !flagSet(fs, "run") {
		*runDir = pos[0]
	} else if len(pos) > 0 {
		return usagef("check takes one run directory, got %q", strings.Join(pos, " "))
	}
	r, err := train.Check(*runDir)
	if err != nil {
		return err
	}
	for _, p := range r.Problems {
		fmt.Fprintf(e.stdout, "problem: %s; %s\n", p.What, p.Action)
	}
	fmt.Fprintln(e.stdout, r.Summary())
	if len(r.Problems) > 0 {
		return fmt.Errorf("%s: %d problem(s), listed above", *runDir, len(r.Problems))
	}
	return nil
}

// loadRun is train.Load (or train.LoadRepository for a .forge
// repository, at rev) for the commands that only read a model, with a
// warning on stderr when it had to use an older checkpoint.
func loadRun(e *env, dir, rev string) (*train.Snapshot, error) {
	snap, err := openModel(dir, rev)
	if err == nil && snap.FellBack != "" {
		fmt.Fprintf(e.stderr, "warning: %s\n", snap.FellBack)
	}
	return snap, err
}

// openModel reads the model in dir: a .forge repository at rev, or a run
// directory (which has no revisions).
func openModel(dir, rev string) (*train.Snapshot, error) {
	if train.IsRepository(dir) {
		return train.MapRepository(dir, rev)
	}
	if rev != "" {
		return nil, usagef("--rev %s: %s is a run directory, not a .forge repository; revisions belong to repositories (forge export --format forge)", rev, dir)
	}
	return train.Load(dir)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
