// Package forward carries a request from the gateway a client called (the entry) to the gateway whose
// instance decodes it (the owner): one hop, streaming, authenticated, with the router's decision pinned so the
// owner does not route again.
//
// A hop is an ordinary HTTP request to the owner's API with three headers: X-Duet-Hop (the hop count; the owner
// refuses a second hop, so a misrouted request cannot loop), X-Duet-Route (the pinned decision) and
// X-Duet-Hop-Auth, an HMAC-SHA256 with the key derived from the cluster secret over the method, path, request
// id, a timestamp, the body's SHA-256 and the route. The proof carries the body's hash too, so the owner checks
// it before it reads the body (a forged hop costs it no body bytes), and the body's hash once read. The owner
// accepts a proof within ±AuthWindow of its clock and only once. A hop that fails the check gets 401; the
// client's own API key is not needed on the owner.
//
// Without a cluster secret nothing tells a hop from a client's request, and the owner treats it as one: it
// needs the client's API key (the entry passes it on), grants no admin rights, and of the pinned decision the
// owner takes only instance ids, resolved against its own cluster state, never an address.
//
// A hop is bounded by an idle timeout (Client.SetIdleTimeout): the entry asks the owner for a sign of life at
// a third of it (X-Duet-Hop-Keepalive), which the owner sends as informational 102 responses until its
// answer's headers and as a stream's heartbeat after them. An owner silent for the whole timeout fails the hop
// with ErrIdle, so a frozen node is given up on in seconds and a long generation is never cut.
package forward
