// Package client is a typed Go client for the duet gateway's own HTTP API: health, the cluster's state, models,
// instances, instance links, the router, model aliases, the gossip keyring, feature flags, the status and
// recent requests of a gateway, the paths between nodes, cluster statistics and the link probe. The OpenAI,
// Responses, Anthropic and Ollama APIs are not here: their official clients speak them.
//
// A Client talks to one gateway. Reads send the API key and writes the admin key (the API key when no admin
// key is set), as the gateway asks (docs/security.md). Every call takes a context; a call whose context has
// no deadline gets the client's default timeout. An answer other than 2xx is an *Error carrying the status and
// the fields of the OpenAI error envelope the gateway sends; a request that gets no answer is a plain error
// that says so.
//
//	c := client.New("http://127.0.0.1:8000", client.WithAPIKey(key))
//	instances, err := c.Instances(ctx)
//
// The types are the API's JSON, defined once: the gateway's server answers with them where it renders a
// whole object the client types (instances and the body that loads one, links, the router, paths, cluster
// statistics, recent requests), so the client cannot drift from what the server writes. Answers built from
// the cluster's own records (State, Status) are mirrored here instead: their types live with the gossip and
// the engine plugin SDK, which a client should not have to link.
//
// duet bench and the end-to-end tests (gateway/e2e) use this package, as does the gateway's server for the
// types; it depends on nothing of duet's, so the server may import it.
package client
