// Package safetensors reads and writes the safetensors format that Hugging Face and MLX models ship their
// weights in: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw tensor bytes.
//
// Reading maps the file into memory (read-only mmap on unix, a plain read elsewhere or when mapping fails), so
// a multi-gigabyte checkpoint costs page cache rather than heap, and float32 tensors can be used in place. The
// header is untrusted input: its length, every shape and every byte range are checked against the file before
// anything is sliced or allocated, and bad files fail with an error naming the file and the tensor.
//
// Writing exists for the model generator: tensors are produced one at a time by a callback so a large model is
// written with one tensor's worth of memory, and the same inputs always produce the same bytes.
package safetensors
