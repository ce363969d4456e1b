// Package engine is the contract between the duet gateway and an engine plugin: the Engine interface, the plain
// Go values it speaks, and Serve, which is the whole main of a plugin:
//
//	func main() { engine.Serve(myengine.New()) }
//
// An engine loads models into instances, describes them (model, architecture, KV layout, backend, prefill
// endpoint), and generates tokens as a stream of events. The gateway runs each engine as a hashicorp/go-plugin
// subprocess and talks to it over gRPC; the protobuf types and generated code stay in sdk/internal/proto, and
// the adapters in this package convert them, so plugin authors never see them. (The adapters sit beside the
// interface, as in Vault's dbplugin/v5, because Serve must be reachable as engine.Serve while the adapters need
// the package's types: Go's import rules allow no other split without a cycle or type aliases.)
//
// The conformance suite in sdk/enginetest checks an implementation through the real adapter, in process and as a
// subprocess.
package engine
