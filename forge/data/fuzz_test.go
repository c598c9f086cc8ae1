package data

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzParseTokens: ParseTokens never panics, and whatever it accepts
// serializes back to exactly the bytes it was given.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("hello, world"))
	f.Add(tokenFile(TokenMagic, 1, 0))
	f.Add(tokenFile(TokenMagic, 1, 3, 1, 2, 65535))
	f.Add(tokenFile(TokenMagic, 1, 4, 1, 2, 3))
	f.Add(tokenFile(TokenMagic, 2, 1, 1, 0))
	f.Add(tokenFile(TokenMagic, 1, -1))
	f.Add(tokenFile(20240326, 1, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		tokens, err := ParseTokens(b)
		if err != nil {
			if tokens != nil {
				t.Fatalf("ParseTokens returned tokens with error %v", err)
			}
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %T is not a *FormatError: %v", err, err)
			}
			return
		}
		if len(b) != HeaderBytes+2*len(tokens) || binary.LittleEndian.Uint32(b) != TokenMagic {
			t.Fatalf("accepted %d bytes as %d tokens", len(b), len(tokens))
		}
		again, err := MarshalTokens(tokens)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted input does not re-serialize identically")
		}
	})
}
