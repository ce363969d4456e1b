package ollama

import (
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// Options are what the routes read of the gateway besides the pipeline: the whole cluster's models, for the
// model endpoints and to resolve the names clients use. Each is read at every request.
type Options struct {
	// Catalog lists the models the cluster serves with the time each was first seen, as /v1/models does.
	Catalog func() map[string]time.Time
	// Cluster is the cluster's tables (an empty snapshot without a cluster); Self is this node's id in them.
	Cluster func() *cluster.Snapshot
	Self    string
	// Local describes this node's instances.
	Local func() []Instance
	// Aliases maps this node's model aliases to the models they name.
	Aliases func() map[string]string
}

// An Instance is one of this node's instances: the model it serves, by the name the cluster routes by, and
// its engine's description of it.
type Instance struct {
	Model string
	Desc  engine.Description
}

// Routes serves Ollama's API on api (/api): generations go to pipe like OpenAI's, so they get the same
// routing, forwarding, admission and P/D; the model endpoints show the whole cluster's models.
func Routes(api fiber.Router, pipe apicore.Pipeline, opts Options) {
	a := ollamaAPI{pipe: pipe, opts: opts}
	api.Post("/chat", func(c *fiber.Ctx) error { return a.generate(c, Chat) })
	api.Post("/generate", func(c *fiber.Ctx) error { return a.generate(c, Generate) })
	api.Get("/tags", a.tags)
	api.Post("/show", a.show)
	api.Get("/ps", a.ps)
	api.Get("/version", a.version)
	// Ollama's model management has no meaning here: say so, rather than "unknown URL".
	for _, path := range []string{"/pull", "/push", "/create", "/copy", "/delete", "/blobs/:digest"} {
		api.All(path, unsupported("this server does not manage models through the Ollama API; load them with duet --model or POST /v1/instances"))
	}
	for _, path := range []string{"/embed", "/embeddings"} {
		api.All(path, unsupported("this server does not serve embeddings"))
	}
}

// ollamaAPI is Ollama's API over a pipeline.
type ollamaAPI struct {
	pipe apicore.Pipeline
	opts Options
}

// unsupported answers an Ollama endpoint duet does not serve: a 404 (the client asked for something this
// server does not have) that says why.
func unsupported(msg string) fiber.Handler {
	return func(*fiber.Ctx) error {
		return &apicore.Error{Status: http.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "unknown_url", Message: msg}
	}
}

// generate is /api/chat and /api/generate.
func (a ollamaAPI) generate(c *fiber.Ctx, kind Kind) error {
	models := a.models()
	known := func(id string) bool { _, ok := models[id]; return ok }
	param := "messages"
	if kind == Generate {
		param = "prompt"
	}
	// A prompt that cannot fit is refused before the body is parsed, as for OpenAI's APIs, under the model's
	// duet id.
	scan, scanned := openai.ScanPrompt(c.Body())
	if scanned {
		if id, ok := Resolve(scan.Model, known); ok {
			scan.Model = id
		}
		if err := a.pipe.RefuseOverlong(scan.Model, scan.PromptBytes, scan.PromptTokens, param); err != nil {
			return err
		}
	}
	var req Request
	var perr *apicore.Error
	if kind == Chat {
		req, perr = ParseChat(c.Body())
	} else {
		req, perr = ParseGenerate(c.Body())
	}
	if perr != nil {
		return perr
	}
	id, ok := Resolve(req.Model, known)
	if !ok {
		return ModelNotFound(req.Model)
	}
	if n, limit := req.NumCtx, models[id].ContextLength; limit > 0 && n > limit {
		return apicore.BadRequest("options.num_ctx", "options.num_ctx is %d, but model %s has a context of %d tokens, fixed when it loads; ask for at most %d", n, req.Model, limit, limit)
	}
	reply := Reply{Kind: kind, Model: req.Model, Logprobs: req.Sampling.Logprobs}
	if req.Load != "" {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(reply.AppendLoad(nil, time.Now(), req.Load))
	}
	return a.pipe.Serve(c, apicore.Call{
		Model: id, Stream: req.Stream, Dialect: Dialect{Reply: reply}, Generate: req.GenerateRequest(),
		PromptBytes: scan.PromptBytes,
	})
}

// models is every model the cluster serves (as /v1/models lists them) with what its instances say of it:
// this node's own description when it has an instance, else another node's published facts.
func (a ollamaAPI) models() map[string]Model {
	out := map[string]Model{}
	for id, t := range a.opts.Catalog() {
		out[id] = Model{ID: id, ModifiedAt: t}
	}
	for _, in := range a.opts.Cluster().Instances {
		m, ok := out[in.Model]
		if !ok || in.Status == cluster.InstanceUnavailable {
			continue
		}
		f, err := cluster.FactsFromLabels(in.Labels)
		if err != nil {
			continue // facts that do not decode say nothing
		}
		if m.Fingerprint == "" {
			m.Backend, m.Architecture, m.Quantization, m.Parameters, m.Fingerprint = f.Backend, f.Architecture, f.Quantization, f.Parameters, in.Fingerprint
		}
		// Requests go to any instance: the smallest context is what every one of them can take.
		if f.ContextLength > 0 && (m.ContextLength == 0 || f.ContextLength < m.ContextLength) {
			m.ContextLength = f.ContextLength
		}
		out[in.Model] = m
	}
	for _, in := range a.opts.Local() {
		m, ok := out[in.Model]
		if !ok {
			continue
		}
		d := in.Desc
		m.Backend, m.Architecture, m.Quantization, m.DType, m.Parameters, m.Fingerprint = d.Backend, d.Architecture, d.Quantization, d.DType, d.Parameters, d.Fingerprint
		m.Capabilities = Capabilities(d.Capabilities)
		if d.ContextLength > 0 && (m.ContextLength == 0 || d.ContextLength < m.ContextLength) {
			m.ContextLength = d.ContextLength
		}
		out[in.Model] = m
	}
	// An alias is listed as a model of its own, with what its model says of itself.
	for name, to := range a.opts.Aliases() {
		if m, ok := out[to]; ok {
			m.ID = name
			out[name] = m
		}
	}
	return out
}

// sortedModels is models in the order of their ids, those keep takes (all, when keep is nil).
func sortedModels(models map[string]Model, keep func(id string) bool) []Model {
	ids := make([]string, 0, len(models))
	for id := range models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]Model, 0, len(models))
	for _, id := range ids {
		if keep == nil || keep(id) {
			out = append(out, models[id])
		}
	}
	return out
}

func (a ollamaAPI) tags(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(AppendTags(nil, sortedModels(a.models(), nil)))
}

func (a ollamaAPI) show(c *fiber.Ctx) error {
	name, perr := ParseShow(c.Body())
	if perr != nil {
		return perr
	}
	models := a.models()
	id, ok := Resolve(name, func(id string) bool { _, ok := models[id]; return ok })
	if !ok {
		return ModelNotFound(name)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(AppendShow(nil, models[id]))
}

// ps lists the models some instance in the cluster is ready to serve. They stay loaded: Ollama says the same
// of keep_alive -1 with an expiry as far away as a duration reaches.
func (a ollamaAPI) ps(c *fiber.Ctx) error {
	ready := map[string]bool{}
	for _, in := range a.opts.Cluster().Instances {
		ready[in.Model] = ready[in.Model] || in.Status == cluster.InstanceReady
	}
	now := time.Now()
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(AppendPs(nil, sortedModels(a.models(), func(id string) bool { return ready[id] }),
		now.Add(time.Duration(math.MaxInt64))))
}

// version reports this gateway's version, as it publishes it to the cluster.
func (a ollamaAPI) version(c *fiber.Ctx) error {
	version := ""
	if n, ok := a.opts.Cluster().Node(cluster.NodeID(a.opts.Self)); ok {
		version = n.Tags.Version
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(AppendVersion(nil, Version(version)))
}

// Dialect renders generations as Ollama does, and the errors of every path under /api.
type Dialect struct {
	Reply Reply
}

var (
	_ apicore.Dialect = Dialect{}
	_ apicore.Encoder = encoder{}
)

func (d Dialect) Answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	r := d.Reply
	r.Route = m.Route
	return r.AppendAnswer(dst, time.Now(), rs[0])
}

func (Dialect) StreamType() string { return ContentType }

func (Dialect) ErrorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, AppendError(dst, e.Message)
}

func (d Dialect) Encoder(m apicore.Meta, _ int) apicore.Encoder {
	r := d.Reply
	r.Route = m.Route
	return encoder{r.NewStream(nil)}
}

// encoder adapts a Stream to the pipeline's stream mechanics; Ollama requests have one choice.
type encoder struct{ s *Stream }

func (e encoder) Start(dst []byte) []byte                    { return dst }
func (e encoder) Event(dst []byte, ev engine.Event) []byte   { return e.s.Event(dst, ev) }
func (e encoder) Fail(dst []byte, err *apicore.Error) []byte { return e.s.Fail(dst, err) }
func (e encoder) Final(dst []byte, _ int, f *engine.Final) ([]byte, bool) {
	return e.s.Final(dst, f), true
}

// Heartbeat writes nothing: NDJSON has no comment, and Ollama's clients read a blank line as a bad object.
func (e encoder) Heartbeat(dst []byte) []byte { return dst }
