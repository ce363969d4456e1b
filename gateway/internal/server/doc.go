// Package server is the gateway's HTTP side on gofiber v2: the request pipeline that runs the client APIs'
// generations (OpenAI's chat and completions, OpenAI's Responses, Anthropic's Messages, Ollama's, each parsed
// and rendered by a package of its own), the cluster and admin APIs, the dashboard, health and metrics. What a gateway runs besides requests (the instances, the cluster membership, the engine and router
// plugins, the hop client to other gateways) is the gateway's node (package node), which the server reaches
// through the Node interface; the server itself joins no cluster and starts no plugin.
//
// # Who owns what
//
// Each job has one owner type, with the dependencies it uses and the routes it registers; server.go builds
// them in New and wires their routes behind the middleware:
//
//   - Server (server.go): construction, App/Serve/Shutdown, the wiring of routes (the client APIs' from their
//     packages, with what each reads of the gateway as explicit options), the error handler that renders every
//     error in the envelope of the API its path belongs to, /healthz, and the request path below.
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
// (middleware.go).
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
// apicore.Dialect its answer is rendered in, through the apicore.Pipeline interface the pipeline satisfies
// (stage_parse.go: Serve, and the refusal of a prompt that cannot fit before it is parsed; tokens.go: the
// token counts of Anthropic's count_tokens). From there the request path is a pipeline of stages over one
// request value (pipeline.go): place, by the router on the node's snapshot of the cluster (stage_place.go);
// then forward to the owning gateway (stage_forward.go, package forward) or run on the local engine plugin
// (stage_run.go, with the run queue of run.go); and render the events with the call's dialect, streamed or
// whole (stage_render.go).
// What watches a request are observers of its lifecycle (decided, first token, finished; observe.go): the
// dashboard's recent list (recent.go), the metrics, the traces, and the speed book that routers deciding by
// time read (observe_speed.go). Client disconnects cancel generations: a watcher reads the connection while a
// request runs (watch.go), so even a long prefill learns at once that nobody is waiting.
//
// The cluster and admin APIs answer from the node's state and write to it; the dashboard reads the same and
// fans out to peers' gateways as hops for what is not gossiped.
package server
