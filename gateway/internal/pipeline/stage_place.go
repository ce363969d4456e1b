package pipeline

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/prefixhash"
	"github.com/duet-ai/duet/sdk/router"
)

// The place stage: where a request runs. The router decides, from the node's snapshot of the cluster and
// what parse learned of the prompt (its length, exact when this node can tokenize it, and its prefix hashes);
// a hop from another gateway carries the decision, and is not routed again.

// place decides where r runs: r.decision, and r.local when the instance is this node's.
func (p *Pipeline) place(r *request) error {
	if r.hopped {
		if r.local != nil {
			return nil // placed on a first attempt; a hop is never forwarded
		}
		return p.fromPinned(r, p.view.Current())
	}
	if r.exclude == nil { // the first attempt: what the router is told of the prompt
		if err := p.promptInfo(r); err != nil {
			return err
		}
		r.prefixHashes = keyedHashes(r.cacheKey, r.prefixHashes)
	}
	return p.decide(r)
}

// decide asks the router where a request runs. Instances in r.exclude failed it already.
func (p *Pipeline) decide(r *request) error {
	snap := p.view.Current()
	known := false
	for i := range snap.Instances {
		if snap.Instances[i].Model == r.model {
			known = true
			break
		}
	}
	if !known {
		// Agents ask for their vendor's models by name: say how to point a name at a served model.
		e := apicore.ModelNotFound(r.model)
		e.Message += fmt.Sprintf(" GET /v1/models lists the models served; to answer this name with one of them, start duet with --model-alias %s=MODEL (or PUT /admin/v1/model-aliases).", r.model)
		return e
	}
	rt, release, err := p.routers.Acquire()
	if err != nil {
		p.log.Warn("router unavailable", "request_id", r.id, "error", err)
		return apicore.Unavailable(fmt.Sprintf("the router plugin is not running now (it is being restarted); retry shortly (request id %s)", r.id))
	}
	maxTokens := r.generate.Sampling.MaxTokens
	if r.fitMaxTokens {
		maxTokens = 0 // any instance will do: its context bounds the answer (fitMaxTokens, once it is picked)
	}
	start := time.Now()
	d, err := rt.Route(r.ctx, router.Request{
		RequestID: r.id, Model: r.model, PromptTokens: r.promptTokens, PrefixHashes: r.prefixHashes,
		SourceNode: snap.Self, MaxTokens: maxTokens, Exclude: r.exclude,
	}, snap)
	release()
	took := time.Since(start)
	r.routeTime += took
	if p.metrics != nil {
		outcome := metrics.Routed
		if errors.Is(err, router.ErrNoCandidate) {
			outcome = metrics.NoCandidate
		} else if err != nil {
			outcome = metrics.RouteError
		}
		p.metrics.RouterDecision(took, outcome)
	}
	if errors.Is(err, router.ErrNoCandidate) {
		return apicore.Unavailable(fmt.Sprintf("no instance of model %q can take the request now", r.model))
	}
	if err != nil {
		p.log.Warn("routing failed", "request_id", r.id, "error", err)
		return apicore.Internal(fmt.Sprintf("the router failed to place the request (request id %s)", r.id))
	}
	if p.log.Enabled(r.ctx, slog.LevelDebug) {
		p.log.Debug("routed", "request_id", r.id, "decode", d.DecodeInstance, "node", d.DecodeNode,
			"prefill", len(d.PrefillEndpoints), "reason", d.Reason, "scores", d.Scores)
	}
	if d.DecodeNode == "" {
		if in, ok := snap.Instance(d.DecodeInstance); ok {
			d.DecodeNode = in.Node
		}
	}
	d.PrefillEndpoints = linkedApproximations(snap, d.DecodeInstance, d.PrefillEndpoints)
	r.decision, r.local = d, nil
	if d.DecodeNode == snap.Self || d.DecodeNode == "" {
		in, ok := p.reg.Get(d.DecodeInstance)
		if !ok {
			return apicore.Unavailable(fmt.Sprintf("the router picked instance %q, which this node does not serve now; retry shortly (request id %s)", d.DecodeInstance, r.id))
		}
		r.local = in
		r.decision.DecodeNode = snap.Self
	}
	return nil
}

// linkedApproximations keeps an endpoint approximate (KV from another quantization) only when an instance link
// pairs it with the decode instance: whatever the router says, the gateway never asks an engine for
// approximate KV that no operator asked for.
func linkedApproximations(snap *router.Snapshot, decode string, eps []router.PrefillEndpoint) []router.PrefillEndpoint {
	out := slices.Clone(eps)
	for i := range out {
		if !out[i].Approximate || linked(snap, out[i].InstanceID, decode) {
			continue
		}
		out[i].Approximate = false // the engine then accepts exact KV only
	}
	return out
}

func linked(snap *router.Snapshot, prefill, decode string) bool {
	for _, l := range snap.InstanceLinks {
		if slices.Contains(l.PrefillInstances, prefill) && slices.Contains(l.DecodeInstances, decode) {
			return true
		}
	}
	return false
}

// engineEndpoints turns a decision's prefill endpoints into the engine's.
func engineEndpoints(eps []router.PrefillEndpoint) []engine.PrefillEndpoint {
	out := make([]engine.PrefillEndpoint, 0, len(eps))
	for _, pe := range eps {
		out = append(out, engine.PrefillEndpoint{InstanceID: pe.InstanceID, Address: pe.Address, Node: pe.Node, Approximate: pe.Approximate})
	}
	return out
}

// pinned turns a decision into the route a hop carries.
func pinned(entry string, d *router.Decision, attempt int) forward.Route {
	r := forward.Route{EntryNode: entry, DecodeNode: d.DecodeNode, DecodeInstance: d.DecodeInstance, Attempt: attempt,
		Reason: cut(d.Reason, forward.MaxReason)}
	// The estimate travels only when the router made a whole one, in finite seconds (JSON has no Inf or NaN).
	first, total := d.Scores[scoreEstimateFirstToken], d.Scores[scoreEstimateTotal]
	if finitePositive(first) && finitePositive(total) {
		r.EstimateFirstToken, r.EstimateTotal = first, total
	}
	for _, pe := range d.PrefillEndpoints {
		r.Prefill = append(r.Prefill, forward.Endpoint{InstanceID: pe.InstanceID, Node: pe.Node, Address: pe.Address, Approximate: pe.Approximate})
	}
	return r
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 1) }

// fromPinned is the decision a hop carries, on its owner. The hop names instances; where their KV is served
// is this node's own knowledge (resolvePinned), never the hop's: in a cluster without a secret a hop is any
// client's request, and a client that could name an address would have this node's engine fetch KV from a
// server of its choosing, whose answer the prefix cache would then serve to everyone.
func (p *Pipeline) fromPinned(r *request, snap *router.Snapshot) error {
	hop := r.hop
	if hop.DecodeInstance == "" {
		return apicore.BadRequest("", "a forwarded request names no decode instance (request id %s)", r.id)
	}
	in, ok := p.reg.Get(hop.DecodeInstance)
	if !ok {
		return apicore.Unavailable(fmt.Sprintf("instance %q is not served by this node now; retry (request id %s)", hop.DecodeInstance, r.id))
	}
	r.local = in
	d := &r.decision
	d.DecodeInstance, d.DecodeNode, d.Reason = hop.DecodeInstance, p.reg.Node(), hop.Reason
	if hop.EstimateTotal > 0 && hop.EstimateFirstToken > 0 {
		d.Scores = map[string]float64{scoreEstimateFirstToken: hop.EstimateFirstToken, scoreEstimateTotal: hop.EstimateTotal}
	}
	r.route.EntryNode, r.route.Forwarded = hop.EntryNode, true
	if len(hop.Prefill) > 0 {
		var dropped []string
		d.PrefillEndpoints, dropped = resolvePinned(snap, hop.DecodeInstance, hop.Prefill)
		if len(dropped) > 0 {
			p.log.Warn("a forwarded request named prefill instances this node does not know as KV servers; they are not used",
				"request_id", r.id, "instances", dropped)
		}
	}
	return nil
}

// resolvePinned turns a hop's prefill instances into endpoints from snap, this node's own view: the address
// is the one this (decode) node reaches the instance's KV server at, as the router would give it, and an
// endpoint is approximate only when the KV is another quantization's and an instance link pairs the two.
// Instances snap does not know, that serve no KV, or that are the decode instance itself are dropped (their
// ids returned): the engine then prefills locally, as it does when a prefill node fails.
func resolvePinned(snap *router.Snapshot, decode string, pinned []forward.Endpoint) (out []router.PrefillEndpoint, dropped []string) {
	dec, ok := snap.Instance(decode)
	if !ok {
		dec = router.Instance{ID: decode, Node: snap.Self}
	}
	for _, e := range pinned {
		p, ok := snap.Instance(e.InstanceID)
		if !ok || p.ID == decode || p.KVEndpoint == "" || p.Status == router.InstanceUnavailable {
			dropped = append(dropped, cut(e.InstanceID, 64))
			continue
		}
		var pathAddr string
		if path, ok := snap.Path(snap.Self, p.Node); ok {
			pathAddr = path.Address
		}
		addr, err := view.ResolveKV(p.KVEndpoint, p.Node == snap.Self, pathAddr)
		if err != nil {
			dropped = append(dropped, cut(e.InstanceID, 64))
			continue
		}
		exact := p.Fingerprint != "" && p.Fingerprint == dec.Fingerprint
		out = append(out, router.PrefillEndpoint{InstanceID: p.ID, Node: p.Node, Address: addr,
			Approximate: e.Approximate && !exact && linked(snap, p.ID, decode)})
	}
	return out, dropped
}

// promptInfo gives the router the prompt's length in tokens and its chained prefix-block hashes: exact when a
// local instance of the model can tokenize it and the prompt is long enough for that to matter, estimated from
// its bytes otherwise. A prompt shorter than TokenizeMinBytes has fewer tokens than bytes, too few for remote
// prefill, and short prefixes gain little from affinity: it costs no tokenizer call.
func (p *Pipeline) promptInfo(r *request) error {
	g := &r.generate
	if n := len(g.PromptTokens); n > 0 {
		r.promptTokens = n
		r.prefixHashes = prefixhash.Blocks(g.PromptTokens)
		return nil
	}
	r.promptTokens = (r.promptBytes + 3) / 4
	if r.promptBytes < p.cfg.TokenizeMinBytes {
		return nil
	}
	var in *node.Instance
	for _, c := range p.reg.ByModel(r.model) {
		if c.Desc.Capabilities.Chat || len(g.Messages) == 0 {
			in = c
			break
		}
	}
	if in == nil {
		return nil
	}
	e, _, err := p.engines.Get()
	if err != nil {
		return nil
	}
	start := time.Now()
	res, err := e.Tokenize(r.ctx, engine.TokenizeRequest{
		InstanceID: in.Desc.InstanceID, Messages: g.Messages, Prompt: g.Prompt,
		AddGenerationPrompt: len(g.Messages) > 0, AddSpecialTokens: len(g.Messages) == 0,
		Tools: g.Tools, TemplateVars: g.TemplateVars,
	})
	r.routeTime += time.Since(start)
	switch engine.CodeOf(err) {
	case "":
	case engine.CodeContextLength, engine.CodeInvalidArgument:
		return apicore.FromEngine(err) // the generation would fail the same way: say so before routing it
	default:
		return nil // tokenizing is an optimisation; the engine that runs the request tokenizes anyway
	}
	r.promptTokens = len(res.Tokens)
	r.prefixHashes = prefixhash.Blocks(res.Tokens)
	return nil
}

// keyedHashes makes a request's prompt_cache_key part of what the router's prefix affinity sees: a hash of the
// key comes first, as a block of its own, and every block hash after it is mixed with it. Turns of one
// conversation then share at least that first block even when their prompts are too short to tokenize for
// routing (or not yet tokenized), so the router prefers the instance that served the key before, which holds
// the conversation's prefix; and the same prompt under different keys does not pull them together, as OpenAI
// keeps the caches of different keys apart. Without a key the hashes are as they were.
func keyedHashes(key string, hashes []uint64) []uint64 {
	if key == "" {
		return hashes
	}
	sum := sha256.Sum256([]byte("duet prompt_cache_key\x00" + key))
	k := binary.LittleEndian.Uint64(sum[:8])
	out := make([]uint64, 0, len(hashes)+1)
	out = append(out, k)
	for _, h := range hashes {
		out = append(out, h^k)
	}
	return out
}
