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
// duet bench and the end-to-end tests (gateway/e2e) use this package; it depends on nothing of duet's.
package client
