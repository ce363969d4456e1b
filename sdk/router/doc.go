// Package router is the contract between the duet gateway and a routing plugin: the Router interface, the
// cluster snapshot it reads and the decision it returns, and Serve, which is the whole main of a plugin:
//
//	func main() { router.Serve(myrouter.New()) }
//
// For every request the gateway hands the router an immutable Snapshot of the cluster (nodes and their health,
// link state between nodes, model instances with their load, and instance links that say which prefill
// instances serve which decode instances) and the router answers with the decode instance and an ordered list
// of prefill endpoints, with a reason. Routing must be pure and fast: microseconds, no I/O.
//
// Over the plugin boundary, a snapshot travels once per version (SetSnapshot), not once per request; Route
// carries only a reference to it. The conformance suite is in sdk/routertest.
package router
