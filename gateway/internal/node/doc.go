// Package node is what a gateway runs besides requests, as consul's agent is for a Consul server: one Node
// per gateway, started by the duet command before it serves and closed after.
//
//   - Identity and keys: the node id kept in the data directory, the cluster secret and what derives from it.
//   - The cluster membership (package cluster, the only importer of serfcluster), and the router's view of
//     it with this node's exact loads laid over (cluster.LocalView).
//   - The engine plugin, supervised and restarted by pluginhost, and the Registry of the instances loaded
//     into it: loaded at start (--model) and over the API, loaded again after a restart, each published to
//     the cluster as loading, ready, draining; each calibrated once loaded, to seed its measured speeds.
//   - The router: built-in ones in process, others as supervised plugins pinned by their SHA-256, behind a
//     RouterSwitch that PUT /admin/v1/router swaps while requests run.
//   - The link prober: a timed download from each peer whose link into a local instance nothing measured.
//   - The hop client (forward.Client) that requests forwarded to another gateway go through.
//
// A request comes from the request path (package pipeline), which the HTTP server (package server) builds
// from the node's parts, taken through a small interface (server.Node): the router's snapshot and the router
// for its decision, the registry for a local instance and its load, the engine for the generation, the hop
// client for another node's instance. The node knows nothing
// of HTTP.
package node
