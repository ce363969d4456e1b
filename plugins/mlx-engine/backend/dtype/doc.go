// Package dtype names the element types that cross the engine's boundaries (KV wire, backends, safetensors
// loading) and converts between their raw little-endian bytes and float32.
//
// It is a leaf package on purpose: the KV wire code, the model loader and every backend need the same bit-exact
// conversions, and a disaggregated deployment only reproduces local decoding if all of them round the same way.
// Conversions to the 16-bit formats round to nearest, ties to even, exactly as IEEE 754 and PyTorch/MLX casts do;
// NaN stays NaN (quiet), infinities stay infinities, and float16 handles subnormals.
package dtype
