// Package fmodel stores models in `.forge` repositories: directories that
// keep every saved revision of a model's tensors the way git keeps the
// revisions of files.
//
// A repository holds
//
//	HEAD                   the current revision: a manifest's hash and a newline
//	manifests/<hash>.json  one revision (a commit), named by the SHA-256 of its bytes
//	shards/<hash>.bin      tensor bytes, named by the SHA-256 of their content
//	lock                   held (flock) by the one process committing
//
// A manifest is a small JSON object: the format and version, the parent
// revision, a message, the time, the model's config, free-form metadata
// (the training step, say), and for every tensor its name, dtype, shape,
// the SHA-256 of its bytes and where they are (one or more parts: a shard,
// an offset and a length). Auxiliary files (the tokenizer) are stored and
// listed the same way.
//
// Shards are laid out for mapping: every part starts at a multiple of
// PageSize (16 KiB, Apple silicon's page) and a shard's length is a
// multiple of it too, so a tensor's bytes can be handed to a device as
// whole pages straight from the file cache. A shard holds at most
// MaxShardBytes (95 MB), so a repository can be pushed to an ordinary git
// host; a tensor larger than that is split into parts across shards (and
// is the one case that loads by copying).
//
// A commit writes only what its parent does not already hold: a tensor
// whose content hash equals one of the parent's reuses the parent's parts,
// so saving again after fine-tuning some layers writes just those layers.
// Writes are ordered for crashes: new shards are written (temporary file,
// sync, rename), then the manifest (the same way), and last HEAD, which
// one rename switches. A process killed at any moment leaves HEAD naming
// the previous complete revision; what it wrote before dying is unused
// and harmless. Two processes never commit at once: the second is refused
// with the holder's pid.
//
// Readers take no lock. Open checks the layout; Load maps the shards of
// one revision (mmap on Unix, read-only, starting on a PageSize boundary)
// and returns tensors whose bytes alias the mapping, after checking every
// part against its shard's size. Snapshot.Lend hands a tensor's pages out
// for use beyond Close — a device takes them as its memory with no copy
// (forge's Tensor.AliasBytes; on Apple silicon a Metal no-copy buffer) —
// and the shard stays mapped until the last of them is gone. Verify
// re-hashes every shard and tensor. Manifests and their references are
// validated before use, so a damaged or hostile repository gives an error
// naming the file, never a panic (the parsers are fuzzed).
package fmodel
