// Package safetensors reads and writes the safetensors file format, the
// plain, pickle-free layout in which Forge saves and loads model weights
// and which other frameworks can read directly.
//
// The package deals in raw bytes and depends on no other Forge package;
// the trainer converts its tensors to and from Tensor values.
//
//	err := safetensors.WriteFile("model.safetensors", []safetensors.Tensor{
//		safetensors.F32("embed.weight", []int{vocab, dim}, embed),
//		safetensors.I32("step", nil, []int32{step}),
//	}, map[string]string{"format": "pt"})
//
//	f, err := safetensors.ReadFile("model.safetensors")
//	w, ok := f.Get("embed.weight")
//	vals, err := w.Float32s()
//
// # Format
//
// A file is three parts:
//
//   - 8 bytes: N, the length of the header, an unsigned little-endian
//     64-bit integer.
//   - N bytes: the header, a UTF-8 JSON object. Each key except
//     "__metadata__" names a tensor and maps to
//     {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}; the
//     optional "__metadata__" maps to an object of string values. The
//     header may end with spaces, which writers add so that the data
//     starts at a multiple of 8 bytes.
//   - The data buffer: the tensors' elements, little-endian and row-major.
//     data_offsets are byte offsets into this buffer (not the file); the
//     tensors lie back to back, without gaps or overlaps, and exactly fill
//     it.
//
// The dtypes are BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32,
// U32, F32, I64, U64 and F64 (see DType). A shape of [] is a scalar (one
// element); a shape containing 0 has no elements and no bytes.
//
// # Writing
//
// Marshal, Write and WriteFile check every tensor first — non-empty,
// unique, UTF-8 names; a known dtype; a Data length equal to
// product(Shape) times the element size — and write nothing when one is
// wrong. Their output is deterministic, a function of the set of tensors
// and of the metadata alone: tensors are laid out by element size, largest
// first, then by name, so each starts at a multiple of its own element size
// from the start of the file (readers can view it in place); the header is
// compact JSON with sorted metadata, padded with spaces to 8 bytes.
//
// WriteFile is atomic: it writes a temporary file next to the target,
// flushes it to disk, renames it over the target and flushes the
// directory. A crash or an error leaves either the old file or the
// complete new one, and no temporary file behind.
//
// # Reading
//
// Unmarshal and ReadFile validate the whole file before returning
// anything: the length prefix against the file size and MaxHeaderSize,
// the header's JSON (including repeated keys, which JSON decoders usually
// resolve silently), every entry's fields, dtype, shape and offsets, the
// agreement of each byte range with its shape and dtype, and the tiling of
// the data buffer. Every problem with the content is a *FormatError whose
// message says what is wrong and what it suggests (a truncated file, a file
// of another format, a corrupt header); ReadFile's I/O errors come as they
// are, and all its errors name the file. Hostile input cannot make them panic or
// allocate more than a small multiple of its own size. Extra fields in a
// tensor entry and dtypes outside the list above are rejected rather than
// ignored.
//
// Decoded tensors are listed in the order of their data. Unmarshal's
// tensors share memory with its input; ReadFile's own a fresh buffer.
//
// # Conversions
//
// Data is raw bytes. The constructors F32, F64, F16, BF16, I32, I64 and U8
// encode Go slices (F16 and BF16 round float32 values to nearest, ties to
// even); Float32s, Float64s, Int32s and Int64s decode them, widening
// exactly where the stored type is narrower (F16 and BF16 to float32, I8
// to int64, and so on) and refusing conversions that could lose
// information.
package safetensors
