package tokenizer

import "testing"

// Decode concatenates, which is what lets generation print tokens one at a
// time: Decode(a ++ b) == Decode(a) + Decode(b) at every split, also where
// a character's bytes are split across tokens.
func TestDecodeConcatenates(t *testing.T) {
	text := "Émile said: \"naïve café\" — 日本語 \xff\xfe ok, it's 2024!\n\n  fin"
	bpe, err := TrainBPE(text+text+text, 300, BPEOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []Tokenizer{bpe, TrainChar("abc"), TrainChar(text)} {
		ids := tok.Encode(text)
		ids = append(ids, tok.VocabSize()+5) // out of range: U+FFFD
		whole := tok.Decode(ids)
		piecewise := ""
		for _, id := range ids {
			piecewise += tok.Decode([]int{id})
		}
		if piecewise != whole {
			t.Errorf("%s: token-by-token decoding %q differs from %q", tok.Kind(), piecewise, whole)
		}
		for cut := range ids {
			if tok.Decode(ids[:cut])+tok.Decode(ids[cut:]) != whole {
				t.Fatalf("%s: split at %d changes the text", tok.Kind(), cut)
			}
		}
	}
}
