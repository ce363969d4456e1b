// Package locality gives a mild preference to decode instances on the node whose gateway received the
// request, which saves forwarding the request and its stream between gateways.
//
// Formula: score = 1 when the instance is on Request.SourceNode (and that is known), 0 otherwise. Its default
// weight is small, so any real difference in load or prefix affinity wins over it.
package locality
