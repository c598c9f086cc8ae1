package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/internal/atomicfile"
)

// Export writes m in a layout Hugging Face transformers loads directly:
// model.safetensors with transformers' parameter names, config.json, the
// forge tokenizer (tokenizer.json is not a transformers tokenizer, so it is
// saved as forge-tokenizer.json) and a README saying how to load it.
//
// Two families map exactly:
//   - RMSNorm + SwiGLU + RoPE without biases → LlamaForCausalLM. Forge
//     rotates interleaved pairs (2i, 2i+1); Llama rotates (i, i+D/2), so
//     the rows of the query and key projections are permuted per head
//     (evens, then odds), which gives identical attention scores.
//   - LayerNorm + GELU + learned positions → GPT2LMHeadModel (weights
//     transposed into GPT-2's Conv1D layout; missing biases exported as
//     zeros).
//
// Mixtures of experts and other combinations return an error naming what
// does not map.
//
// The linear layers' weights are the ones the model computes with
// (nn.Linear.EffectiveWeight): under quant the fake-quantised float32
// values, pruned entries zero, so the exported model computes what the
// trained one does.
func Export(m *gpt.Model, tok tokenizer.Tokenizer, dir string) (family string, err error) {
	c := m.Config
	if c.MoE() {
		return "", fmt.Errorf("train: export: a mixture of experts (n_experts %d) maps to neither Llama nor GPT-2 (the run's checkpoints/*/model.safetensors still load with any safetensors reader)", c.Experts)
	}
	var tensors []safetensors.Tensor
	var config map[string]any
	err = forge.Try(func() {
		forge.NoGrad(func() {
			switch {
			case c.Norm == "rmsnorm" && c.MLP == "swiglu" && c.Position == "rope" && !c.Bias:
				family = "llama"
				tensors, config = exportLlama(m)
			case c.Norm == "layernorm" && c.MLP == "gelu" && c.Position == "learned" && c.KVHeads == c.Heads:
				family = "gpt2"
				tensors, config = exportGPT2(m)
			}
		})
	})
	if err != nil {
		return "", err
	}
	if family == "" {
		return "", fmt.Errorf("train: export: no transformers architecture matches norm %q, mlp %q, position %q, bias %v, kv heads %d/%d; "+
			"Llama needs rmsnorm+swiglu+rope without biases, GPT-2 layernorm+gelu+learned (the run's checkpoints/*/model.safetensors still load with any safetensors reader)",
			c.Norm, c.MLP, c.Position, c.Bias, c.KVHeads, c.Heads)
	}
	// The set is written into a new sibling directory and switched in
	// whole, so a crash leaves either the old export or the new one,
	// never a new model beside an old tokenizer.
	tmp, err := prepareExportDir(dir)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // nothing is left there after the switch
	if err := safetensors.WriteFile(filepath.Join(tmp, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		return "", err
	}
	if err := writeJSON(filepath.Join(tmp, "config.json"), config); err != nil {
		return "", err
	}
	if tok != nil {
		if err := tok.Save(filepath.Join(tmp, "forge-tokenizer.json")); err != nil {
			return "", err
		}
	}
	if err := writeFileAtomic(filepath.Join(tmp, "README.md"), []byte(exportReadme(family, c))); err != nil {
		return "", err
	}
	return family, switchExportDir(tmp, dir)
}

// exportFiles are the files Export writes; a directory holding anything
// else is not overwritten.
var exportFiles = []string{"model.safetensors", "config.json", "forge-tokenizer.json", "README.md"}

// prepareExportDir checks that dir is new, empty or an earlier export,
// restores an earlier export that a crash left aside (.<dir>.old-*),
// removes the leftovers of interrupted exports (.<dir>.tmp-*), and makes
// the directory the new export is written into.
func prepareExportDir(dir string) (string, error) {
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("train: export: %v", err)
	}
	olds, _ := filepath.Glob(filepath.Join(parent, "."+base+".old-*"))
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) && len(olds) > 0 {
		if err := os.Rename(olds[0], dir); err != nil {
			return "", fmt.Errorf("train: export: restoring the export a crash left at %s: %v", olds[0], err)
		}
		olds = olds[1:]
	}
	tmps, _ := filepath.Glob(filepath.Join(parent, "."+base+".tmp-*"))
	for _, p := range append(olds, tmps...) {
		os.RemoveAll(p)
	}
	if ents, err := os.ReadDir(dir); err == nil {
		var foreign []string
		for _, e := range ents {
			if !slices.Contains(exportFiles, e.Name()) && !atomicfile.IsTemp(e.Name()) {
				foreign = append(foreign, e.Name())
			}
		}
		if len(foreign) > 0 {
			return "", fmt.Errorf("train: export: %s holds files an export does not write (%s); export to a new or empty directory, or remove them", dir, strings.Join(foreign, ", "))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("train: export: %v", err)
	}
	tmp, err := atomicfile.MkdirTemp(parent, "."+base+".tmp-")
	if err != nil {
		return "", fmt.Errorf("train: export: %v", err)
	}
	return tmp, nil
}

// switchExportDir puts the complete export tmp in dir's place: one rename
// if dir does not exist, else dir aside, tmp in, the old one removed.
func switchExportDir(tmp, dir string) error {
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("train: export: %v", err)
		}
		atomicfile.SyncDir(parent)
		return nil
	}
	old := strings.Replace(tmp, "."+base+".tmp-", "."+base+".old-", 1)
	if err := os.Rename(dir, old); err != nil {
		return fmt.Errorf("train: export: %v", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.Rename(old, dir) // put the old one back
		return fmt.Errorf("train: export: %v", err)
	}
	atomicfile.SyncDir(parent)
	return os.RemoveAll(old)
}

func f32(name string, t *forge.Tensor) safetensors.Tensor {
	return safetensors.F32(name, t.Shape(), t.Contiguous().Float32s())
}

// ropeRows permutes the rows of a (heads·D, C) projection from forge's
// interleaved pairs to Llama's halves: per head, rows 0,2,4,… then 1,3,5,….
func ropeRows(w *forge.Tensor, heads, d int) *forge.Tensor {
	c := w.Size(1)
	return w.Reshape(heads, d/2, 2, c).Transpose(1, 2).Reshape(heads*d, c)
}

func exportLlama(m *gpt.Model) ([]safetensors.Tensor, map[string]any) {
	c := m.Config
	H, K, D := c.Heads, c.KVHeads, c.HeadDim()
	ts := []safetensors.Tensor{f32("model.embed_tokens.weight", m.Wte.Weight)}
	for i, b := range m.Blocks {
		p := fmt.Sprintf("model.layers.%d.", i)
		qkv := b.Attn.WQKV.EffectiveWeight().Split(0, H*D, K*D, K*D)
		ts = append(ts,
			f32(p+"input_layernorm.weight", b.Norm1.Weight),
			f32(p+"self_attn.q_proj.weight", ropeRows(qkv[0], H, D)),
			f32(p+"self_attn.k_proj.weight", ropeRows(qkv[1], K, D)),
			f32(p+"self_attn.v_proj.weight", qkv[2]),
			f32(p+"self_attn.o_proj.weight", b.Attn.WO.EffectiveWeight()),
			f32(p+"post_attention_layernorm.weight", b.Norm2.Weight),
			f32(p+"mlp.gate_proj.weight", b.MLP.Gate.EffectiveWeight()),
			f32(p+"mlp.up_proj.weight", b.MLP.Up.EffectiveWeight()),
			f32(p+"mlp.down_proj.weight", b.MLP.Down.EffectiveWeight()),
		)
	}
	ts = append(ts, f32("model.norm.weight", m.NormF.Weight))
	if m.Head != nil {
		ts = append(ts, f32("lm_head.weight", m.Head.EffectiveWeight()))
	}
	return ts, map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"vocab_size": c.PaddedVocab(), "hidden_size": c.Dim, "intermediate_size": c.FFNHidden,
		"num_hidden_layers": c.Layers, "num_attention_heads": H, "num_key_value_heads": K, "head_dim": D,
		"max_position_embeddings": c.Context, "rms_norm_eps": c.NormEps, "rope_theta": c.RoPETheta,
		"hidden_act": "silu", "tie_word_embeddings": m.Head == nil, "attention_bias": false, "mlp_bias": false,
		"torch_dtype": "float32", "initializer_range": c.InitStd,
	}
}

func exportGPT2(m *gpt.Model) ([]safetensors.Tensor, map[string]any) {
	c := m.Config
	zeros := func(n int) *forge.Tensor { return forge.Zeros(n) }
	bias := func(t *forge.Tensor, n int) *forge.Tensor {
		if t == nil {
			return zeros(n)
		}
		return t
	}
	ts := []safetensors.Tensor{f32("transformer.wte.weight", m.Wte.Weight), f32("transformer.wpe.weight", m.Wpe.Weight)}
	for i, b := range m.Blocks {
		p := fmt.Sprintf("transformer.h.%d.", i)
		F := b.MLP.Up.Weight.Size(0)
		ts = append(ts,
			f32(p+"ln_1.weight", b.Norm1.Weight), f32(p+"ln_1.bias", bias(b.Norm1.Bias, c.Dim)),
			f32(p+"attn.c_attn.weight", b.Attn.WQKV.EffectiveWeight().T()), f32(p+"attn.c_attn.bias", bias(b.Attn.WQKV.Bias, 3*c.Dim)),
			f32(p+"attn.c_proj.weight", b.Attn.WO.EffectiveWeight().T()), f32(p+"attn.c_proj.bias", bias(b.Attn.WO.Bias, c.Dim)),
			f32(p+"ln_2.weight", b.Norm2.Weight), f32(p+"ln_2.bias", bias(b.Norm2.Bias, c.Dim)),
			f32(p+"mlp.c_fc.weight", b.MLP.Up.EffectiveWeight().T()), f32(p+"mlp.c_fc.bias", bias(b.MLP.Up.Bias, F)),
			f32(p+"mlp.c_proj.weight", b.MLP.Down.EffectiveWeight().T()), f32(p+"mlp.c_proj.bias", bias(b.MLP.Down.Bias, c.Dim)),
		)
	}
	ts = append(ts, f32("transformer.ln_f.weight", m.NormF.Weight), f32("transformer.ln_f.bias", bias(m.NormF.Bias, c.Dim)))
	if m.Head != nil {
		ts = append(ts, f32("lm_head.weight", m.Head.EffectiveWeight()))
	}
	return ts, map[string]any{
		"architectures": []string{"GPT2LMHeadModel"}, "model_type": "gpt2",
		"vocab_size": c.PaddedVocab(), "n_positions": c.Context, "n_ctx": c.Context, "n_embd": c.Dim,
		"n_layer": c.Layers, "n_head": c.Heads, "n_inner": c.FFNHidden, "activation_function": "gelu_new",
		"layer_norm_epsilon": c.NormEps, "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0,
		"tie_word_embeddings": m.Head == nil, "torch_dtype": "float32", "initializer_range": c.InitStd,
	}
}

func exportReadme(family string, c gpt.Config) string {
	class := map[string]string{"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}[family]
	return fmt.Sprintf(`# Exported from Forge

A %s model (%d layers, d_model %d, %d heads, context %d, vocabulary %d padded to %d)
in Hugging Face transformers' layout: model.safetensors + config.json.

    from transformers import %s
    model = %s.from_pretrained("path/to/this/directory")
    logits = model(input_ids).logits[..., :%d]   # ids >= %d are padding

The tokenizer is Forge's own (forge-tokenizer.json: byte-level BPE merges or
characters); encode prompts with Forge (forge generate) or reimplement it from
the merges. Without transformers, the weights load with any safetensors reader,
e.g. safetensors.torch.load_file("model.safetensors").
`, class, c.Layers, c.Dim, c.Heads, c.Context, c.Vocab, c.PaddedVocab(), class, class, c.Vocab, c.Vocab)
}
