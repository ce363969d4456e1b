// Package mpack is the small, bounded subset of MessagePack that the KV wire protocol needs: appenders that
// always choose the shortest encoding (as msgspec and @msgpack/msgpack do), and a Reader over one complete
// frame that never trusts a length.
//
// Why not a general-purpose decoder: the bytes come from the network, and general decoders (vmihailenco/msgpack
// v5.4.1 among them) allocate whatever a str, bin, array or map header claims and recurse without limit. The
// Reader here checks every length against the bytes left in the frame before anything is allocated or
// iterated, aliases str and bin payloads instead of copying them, skips unknown values without recursion, and
// bounds nesting depth. It allocates nothing itself.
package mpack
