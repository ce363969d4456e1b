// Package kvwiretest provides exo-shaped KV wire peers for tests: a server and a client that speak the protocol
// exactly as exo does (PR #1993's msgspec structs, field order and shortest integer encodings), with no duet
// extensions, so any package can check that it interoperates with a plain exo peer in both directions.
//
// Frames are encoded with vmihailenco/msgpack (an implementation independent of kvwire's hand-written encoder)
// from structs that mirror exo's; incoming frames are decoded with kvwire's bounded decoders, which ignore
// unknown keys just as msgspec does. The package also builds deterministic KV chunks to send and compare.
package kvwiretest
