package server

import (
	"math"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/ollama"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// ollamaAPI is Ollama's API over the pipeline: its handlers parse in Ollama's dialect and hand generations
// to the pipeline; its model endpoints read the cluster the pipeline sees.
type ollamaAPI struct{ *pipeline }

// ollamaRoutes serves Ollama's API under /api: generations go through serve like OpenAI's, so they get the
// same routing, forwarding, admission and P/D; the model endpoints show the whole cluster's models.
func ollamaRoutes(api fiber.Router, pipe *pipeline) {
	p := ollamaAPI{pipe}
	api.Post("/chat", func(c *fiber.Ctx) error { return p.ollamaGenerate(c, ollama.Chat) })
	api.Post("/generate", func(c *fiber.Ctx) error { return p.ollamaGenerate(c, ollama.Generate) })
	api.Get("/tags", p.ollamaTags)
	api.Post("/show", p.ollamaShow)
	api.Get("/ps", p.ollamaPs)
	api.Get("/version", p.ollamaVersion)
	// Ollama's model management has no meaning here: say so, rather than "unknown URL".
	for _, path := range []string{"/pull", "/push", "/create", "/copy", "/delete", "/blobs/:digest"} {
		api.All(path, ollamaUnsupported("this server does not manage models through the Ollama API; load them with duet --model or POST /v1/instances"))
	}
	for _, path := range []string{"/embed", "/embeddings"} {
		api.All(path, ollamaUnsupported("this server does not serve embeddings"))
	}
}

// ollamaErrors is the dialect of errors under /api.
func ollamaErrors() dialect { return ollamaDialect{} }

// ollamaUnsupported answers an Ollama endpoint duet does not serve: a 404 (the client asked for something
// this server does not have) that says why.
func ollamaUnsupported(msg string) fiber.Handler {
	return func(*fiber.Ctx) error {
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "unknown_url", Message: msg}
	}
}

// ollamaGenerate is /api/chat and /api/generate.
func (p ollamaAPI) ollamaGenerate(c *fiber.Ctx, kind ollama.Kind) error {
	models := p.ollamaModels()
	known := func(id string) bool { _, ok := models[id]; return ok }
	param := "messages"
	if kind == ollama.Generate {
		param = "prompt"
	}
	// A prompt that cannot fit is refused before the body is parsed, as for OpenAI's APIs, under the model's
	// duet id.
	scan, scanned := openai.ScanPrompt(c.Body())
	if scanned {
		if id, ok := ollama.Resolve(scan.Model, known); ok {
			scan.Model = id
		}
		if err := p.refuseScanned(scan, param); err != nil {
			return err
		}
	}
	var req ollama.Request
	var perr *openai.Error
	if kind == ollama.Chat {
		req, perr = ollama.ParseChat(c.Body())
	} else {
		req, perr = ollama.ParseGenerate(c.Body())
	}
	if perr != nil {
		return perr
	}
	id, ok := ollama.Resolve(req.Model, known)
	if !ok {
		return ollama.ModelNotFound(req.Model)
	}
	if n, limit := req.NumCtx, models[id].ContextLength; limit > 0 && n > limit {
		return openai.BadRequest("options.num_ctx", "options.num_ctx is %d, but model %s has a context of %d tokens, fixed when it loads; ask for at most %d", n, req.Model, limit, limit)
	}
	reply := ollama.Reply{Kind: kind, Model: req.Model, Logprobs: req.Sampling.Logprobs}
	if req.Load != "" {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(reply.AppendLoad(nil, time.Now(), req.Load))
	}
	return p.serve(c, &request{
		model: id, stream: req.Stream, dialect: ollamaDialect{reply: reply}, generate: req.GenerateRequest(),
		promptBytes: scan.PromptBytes,
	})
}

// ollamaModels is every model the cluster serves (as /v1/models lists them) with what its instances say of
// it: this node's own description when it has an instance, else another node's published facts.
func (p ollamaAPI) ollamaModels() map[string]ollama.Model {
	out := map[string]ollama.Model{}
	for id, t := range p.models() {
		out[id] = ollama.Model{ID: id, ModifiedAt: t}
	}
	for _, in := range p.snapshot().Instances {
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
	for _, in := range p.reg.All() {
		m, ok := out[in.Spec.Model]
		if !ok {
			continue
		}
		d := in.Desc
		m.Backend, m.Architecture, m.Quantization, m.DType, m.Parameters, m.Fingerprint = d.Backend, d.Architecture, d.Quantization, d.DType, d.Parameters, d.Fingerprint
		m.Capabilities = ollama.Capabilities(d.Capabilities)
		if d.ContextLength > 0 && (m.ContextLength == 0 || d.ContextLength < m.ContextLength) {
			m.ContextLength = d.ContextLength
		}
		out[in.Spec.Model] = m
	}
	// An alias is listed as a model of its own, with what its model says of itself.
	for name, to := range p.aliases.All() {
		if m, ok := out[to]; ok {
			m.ID = name
			out[name] = m
		}
	}
	return out
}

func sortedModels(models map[string]ollama.Model, keep func(id string) bool) []ollama.Model {
	out := make([]ollama.Model, 0, len(models))
	for _, id := range sortedKeys(models) {
		if keep == nil || keep(id) {
			out = append(out, models[id])
		}
	}
	return out
}

func (p ollamaAPI) ollamaTags(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(ollama.AppendTags(nil, sortedModels(p.ollamaModels(), nil)))
}

func (p ollamaAPI) ollamaShow(c *fiber.Ctx) error {
	name, perr := ollama.ParseShow(c.Body())
	if perr != nil {
		return perr
	}
	models := p.ollamaModels()
	id, ok := ollama.Resolve(name, func(id string) bool { _, ok := models[id]; return ok })
	if !ok {
		return ollama.ModelNotFound(name)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(ollama.AppendShow(nil, models[id]))
}

// ollamaPs lists the models some instance in the cluster is ready to serve. They stay loaded: Ollama says
// the same of keep_alive -1 with an expiry as far away as a duration reaches.
func (p ollamaAPI) ollamaPs(c *fiber.Ctx) error {
	ready := map[string]bool{}
	for _, in := range p.snapshot().Instances {
		ready[in.Model] = ready[in.Model] || in.Status == cluster.InstanceReady
	}
	now := time.Now()
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(ollama.AppendPs(nil, sortedModels(p.ollamaModels(), func(id string) bool { return ready[id] }),
		now.Add(time.Duration(math.MaxInt64))))
}

// ollamaVersion reports this gateway's version, as it publishes it to the cluster.
func (p ollamaAPI) ollamaVersion(c *fiber.Ctx) error {
	version := ""
	if n, ok := p.snapshot().Node(cluster.NodeID(p.reg.Node())); ok {
		version = n.Tags.Version
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(ollama.AppendVersion(nil, ollama.Version(version)))
}

// ollamaDialect renders generations and errors as Ollama does.
type ollamaDialect struct {
	reply ollama.Reply
}

func (d ollamaDialect) answer(dst []byte, m openai.Meta, rs openai.Results) []byte {
	r := d.reply
	r.Route = m.Route
	return r.AppendAnswer(dst, time.Now(), rs[0])
}

func (ollamaDialect) streamType() string { return ollama.ContentType }

func (ollamaDialect) errorBody(dst []byte, e *openai.Error) (int, []byte) {
	return e.Status, ollama.AppendError(dst, e.Message)
}

func (d ollamaDialect) encoder(m openai.Meta, _ int) encoder {
	r := d.reply
	r.Route = m.Route
	return ollamaEncoder{r.NewStream(nil)}
}

// ollamaEncoder adapts ollama.Stream to the encoder interface; Ollama requests have one choice.
type ollamaEncoder struct{ s *ollama.Stream }

func (e ollamaEncoder) start(dst []byte) []byte                   { return dst }
func (e ollamaEncoder) event(dst []byte, ev engine.Event) []byte  { return e.s.Event(dst, ev) }
func (e ollamaEncoder) fail(dst []byte, err *openai.Error) []byte { return e.s.Fail(dst, err) }
func (e ollamaEncoder) final(dst []byte, _ int, f *engine.Final) ([]byte, bool) {
	return e.s.Final(dst, f), true
}

// heartbeat writes nothing: NDJSON has no comment, and Ollama's clients read a blank line as a bad object.
func (e ollamaEncoder) heartbeat(dst []byte) []byte { return dst }
