package safetensors

import "strings"

// DType is the element type of a tensor, spelled as in the file header.
type DType string

// The element types this package reads and writes. All are stored
// little-endian; F8_E5M2 and F8_E4M3 are the two 8-bit float layouts, BF16
// is bfloat16 (the top half of a float32) and BOOL is one byte per element.
const (
	DTypeBool   DType = "BOOL"
	DTypeU8     DType = "U8"
	DTypeI8     DType = "I8"
	DTypeF8E5M2 DType = "F8_E5M2"
	DTypeF8E4M3 DType = "F8_E4M3"
	DTypeI16    DType = "I16"
	DTypeU16    DType = "U16"
	DTypeF16    DType = "F16"
	DTypeBF16   DType = "BF16"
	DTypeI32    DType = "I32"
	DTypeU32    DType = "U32"
	DTypeF32    DType = "F32"
	DTypeI64    DType = "I64"
	DTypeU64    DType = "U64"
	DTypeF64    DType = "F64"
)

// dtypes lists the supported element types, largest element first, then
// alphabetically. This is also the order Marshal lays tensors out in.
var dtypes = []DType{
	DTypeF64, DTypeI64, DTypeU64,
	DTypeF32, DTypeI32, DTypeU32,
	DTypeBF16, DTypeF16, DTypeI16, DTypeU16,
	DTypeBool, DTypeF8E4M3, DTypeF8E5M2, DTypeI8, DTypeU8,
}

// Size is the number of bytes of one element, or 0 if d is not a supported
// element type.
func (d DType) Size() int {
	switch d {
	case DTypeBool, DTypeU8, DTypeI8, DTypeF8E5M2, DTypeF8E4M3:
		return 1
	case DTypeI16, DTypeU16, DTypeF16, DTypeBF16:
		return 2
	case DTypeI32, DTypeU32, DTypeF32:
		return 4
	case DTypeI64, DTypeU64, DTypeF64:
		return 8
	}
	return 0
}

// supportedDTypes is the list used in error messages about unknown dtypes.
func supportedDTypes() string {
	names := make([]string, len(dtypes))
	for i, d := range dtypes {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}
