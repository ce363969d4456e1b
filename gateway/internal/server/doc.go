// Package server is the gateway's HTTP side on gofiber v2: the middleware every request passes, the cluster
// and admin APIs, the dashboard, health and metrics, and the wiring of the client APIs (OpenAI's chat and
// completions, OpenAI's Responses, Anthropic's Messages, Ollama's, each parsed and rendered by a package of
// its own) to the request path (package pipeline), which runs their generations. What a gateway runs besides
// requests (the instances, the cluster membership, the engine and router plugins, the hop client to other
// gateways) is the gateway's node (package node), which the server reaches through the Node interface; the
// server itself joins no cluster and starts no plugin.
//
// # Who owns what
//
// Each job has one owner type, with the dependencies it uses and the routes it registers; server.go builds
// them in New and wires their routes behind the middleware:
//
//   - Server (server.go): construction, App/Serve/Shutdown, the wiring of routes (the client APIs' from their
//     packages, with what each reads of the gateway as explicit options), the error handler that renders every
//     error in the envelope of the API its path belongs to, /healthz, and the figures the metrics read of
//     the instances and of admission.
//   - pipeline.Pipeline (package pipeline): the request path. New builds it from the node's parts and the
//     server's configuration (pipeline.Config, pipeline.Deps); the client APIs' routes get it as their
//     apicore.Pipeline. Its admission limiter is shared with the admin API's status, its recent ring with the
//     dashboard.
//   - guard (guard.go, protect.go): who may do what. API keys on every read and generation, admin keys on the
//     writes that change the cluster, protected mode (no admin key: writes from loopback only), and the proof
//     of a hop from another gateway (the cluster secret's HMAC over the request and its body). It also says
//     what the gateway leaves open (Server.Exposure).
//   - bodyReader (body.go): reads request bodies itself, within a byte budget for all bodies in flight.
//   - clusterAPI (clusterapi.go, loadpolicy.go): the models the cluster serves (GET /v1/models, through the
//     modelCatalog that Ollama's /api/tags shares), every node's instances, and loading or unloading an
//     instance on any node; a write for another node is forwarded to its gateway.
//   - adminAPI (admin.go, aliases.go): exo's instance links, feature flags and /state, this node's status,
//     the router and its swap, the model aliases, the gossip keyring.
//   - dashboard (ui.go): the page's files and its reads: recent requests (this node's or a peer's), the paths
//     between nodes, every node's engine figures, a dry run of an instance link.
//   - linkProbes (linkprobe.go): the serving side of the node's link probes, one at a time.
//
// Request ids, the access log, the framing check and a hop's keep-alives are plain middleware functions
// (middleware.go). What they leave on a request for the handlers after them (its id, a hop's route and
// keep-alive interval, the release of its body) goes through package locals, which the pipeline reads too.
//
// # Where a request comes from and where it goes
//
// A request comes from a client, or from another gateway as a hop. It passes the middleware in order: request
// id, access log and framing check for every path; then, on /v1, /api and /admin/v1, the guard's
// authentication (authOrHop: a key, or a hop's proof checked before its body is read), the bodyReader, the
// guard's check of a hop's body against its proof, and a hop's keep-alives. The guard's admin checks stand in
// front of each write.
//
// A generation's route belongs to its client API's package (openai, responses, anthropic, ollama): its
// handler parses the body in the API's dialect and hands the pipeline an apicore.Call, with the
// apicore.Dialect its answer is rendered in. From there the request is package pipeline's: placed by the
// router, forwarded to the owning gateway or run on the local engine plugin, and rendered (go doc
// ./gateway/internal/pipeline). When the handler returns, the access log tells the pipeline (pipeline.Finish)
// so that its observers see the request end, and counts a generation refused before it reached the
// pipeline.
//
// The cluster and admin APIs answer from the node's state and write to it; the dashboard reads the same and
// fans out to peers' gateways as hops for what is not gossiped.
package server
