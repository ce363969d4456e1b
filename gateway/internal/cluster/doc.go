// Package cluster is the gateway's membership in the duet cluster: one serfcluster agent per gateway, and what
// the gateway needs on top of it.
//
//   - Identity: a node id created once and kept in the data directory, and the keys derived from the one
//     cluster secret an operator manages (sdk/clustersecret), which can hold several secrets for rotation.
//   - Publishing: the gateway's instances, with the facts another gateway needs to route to them and to check
//     KV compatibility (backend, KV layout, KVCompat, context length, bytes per token), carried as serfcluster
//     instance labels and decoded by one strict function.
//   - The router's view: serfcluster snapshots converted to sdk/router snapshots once per cluster snapshot,
//     with this node's own in-flight counts laid over them (LocalView; gossip lags; the local count is exact).
//   - Instance links, exo's API: validated against the cluster's instances before they are written.
//
// It is the gateway's only importer of serfcluster: types.go names what the rest of the gateway reads of the
// cluster's tables. The node (package node) starts the agent and publishes its instances through it; a
// request meets the cluster when the server asks the node's LocalView for the router's snapshot, and when
// the router's decision names another node, whose API address comes from here (APIEndpoint).
package cluster
