// Package router is the contract between the duet gateway and a routing plugin: the Router interface, the
// cluster snapshot it reads and the decision it returns, and Serve, which is the whole main of a plugin:
//
//	func main() { router.Serve(myrouter.New()) }
//
// For every request the gateway hands the router an immutable Snapshot of the cluster (nodes and their health,
// the network paths between nodes, model instances with their load, and instance links that say which prefill
// instances serve which decode instances) and the router answers with the decode instance and an ordered list
// of prefill endpoints, with a reason. Routing must be pure and fast: microseconds, no I/O. A "link" here is
// always an instance link; the network between two nodes is a Path.
//
// KV cache moves between instances whose Fingerprint is equal (exactly) or, when an instance link pairs them,
// whose KVCompat is equal (approximately: another quantization of the same model); PrefillEndpoint.Approximate
// says which. Request.Exclude names instances that must not decode the request, for the gateway's retry.
//
// Over the plugin boundary, a snapshot travels once per version (SetSnapshot), not once per request; Route
// carries only a reference to it. The conformance suite is in sdk/routertest.
package router
