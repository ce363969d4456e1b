// Package forward carries a request from the gateway a client called (the entry) to the gateway whose
// instance decodes it (the owner): one hop, streaming, authenticated, with the router's decision pinned so the
// owner does not route again.
//
// A hop is an ordinary HTTP request to the owner's API with three headers: X-Duet-Hop (the hop count; the owner
// refuses a second hop, so a misrouted request cannot loop), X-Duet-Route (the pinned decision) and
// X-Duet-Hop-Auth, an HMAC-SHA256 with the key derived from the cluster secret over the method, path, request
// id, a timestamp, the body's SHA-256 and the route. The owner accepts a proof within ±AuthWindow of its clock
// and only once. A hop that fails the check gets 401; the client's own API key is not needed on the owner.
package forward
