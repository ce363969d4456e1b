package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// export is the state of a KV wire prefill job: the loop prefills its tokens like any prompt, and after each
// prefill step streams the new positions of every attention layer to the client, so the transfer overlaps the
// compute; the states of linear layers follow the last step.
type export struct {
	job      *kvwire.Job
	w        *kvwire.Writer
	startPos int // positions the client already holds
	// fingerprint and kvCompat are this model's, for the header (kvCompat only when the client asked).
	fingerprint, kvCompat string
	sent                  int // positions streamed so far (absolute)
	dtype                 kvwire.DType
}

var errShuttingDown = errors.New("the engine is shutting down")

// SubmitExport hands a KV wire job to the loop. It never blocks (it runs on a connection goroutine); false
// means the queue is full and the caller should answer busy. The job's request must already be checked
// against this model (id, fingerprint or KVCompat); the loop checks the tokens. fingerprint and kvCompat
// describe this model to the client in the header (kvCompat empty unless the client accepts approximate KV).
func (r *Runner) SubmitExport(job *kvwire.Job, fingerprint, kvCompat string) bool {
	ctx := job.Context()
	s := &seq{
		req:    Request{ID: job.Request.RequestID, Prompt: job.Request.TokenIDs, Arrived: time.Now()},
		ctx:    ctx,
		cancel: func() {},
		export: &export{job: job, startPos: job.Request.StartPos, fingerprint: fingerprint, kvCompat: kvCompat},
	}
	select {
	case r.exports <- s:
		return true
	default:
		return false
	}
}

// prepareExport accepts the job, checks it, and starts its cache from the longest cached prefix: every
// position is needed, so a full hit means nothing to compute (except with sliding windows, below).
func (r *Runner) prepareExport(s *seq) error {
	e := s.export
	w, err := e.job.Accept()
	if err != nil {
		return err // the server already answered (the job waited too long)
	}
	e.w = w
	tokens := s.req.Prompt
	n := len(tokens)
	switch {
	case n == 0:
		return badRequest("token_ids is empty")
	case n >= r.maxCtx:
		return badRequest(fmt.Sprintf("%d tokens exceed the model's context of %d", n, r.maxCtx))
	case e.startPos > n:
		return badRequest(fmt.Sprintf("start_pos %d is past the %d tokens", e.startPos, n))
	}
	for i, t := range tokens {
		if int(t) >= r.vocab {
			return badRequest(fmt.Sprintf("token %d (%d) is not in the vocabulary of %d tokens", i, t, r.vocab))
		}
	}
	layout := r.model.KVLayout()
	if e.dtype, err = kvwire.ParseDType(string(layout.DType)); err != nil {
		return err
	}
	// A sliding layer sends the W positions its window holds at the end of the prompt, [L-W, L), one more than
	// a next query sees. After a hit at k < L the positions from L-W on are the clone's [k-W+1, k) or computed
	// here (a step leaves a layer its last W); a full hit, k = L, serves only if the entry is restorable at L-1
	// too, which means that it holds [L-W, L).
	ok := restorable
	for _, ly := range layout.Layers {
		if ly.Kind == backend.KVSliding {
			ok = func(c backend.Cache, k int) bool { return c.Restorable(k) && (k < n || c.Restorable(k-1)) }
		}
	}
	if h, hit := r.prefix.LookupFunc(tokens, n, ok); h != nil {
		c, err := h.Value().Clone(hit)
		h.Release()
		if err == nil {
			s.cache, s.cached, s.prefilled = c, hit, hit
		}
	}
	if s.cache == nil {
		if s.cache, err = r.model.NewCache(); err != nil {
			return fmt.Errorf("allocate a KV cache: %w", err)
		}
	}
	e.sent = e.startPos
	if err := w.Header(kvwire.Header{
		RequestID: e.job.Request.RequestID, ModelID: e.job.Request.ModelID, NumLayers: layout.NumLayers(),
		DType: e.dtype, StartPos: e.startPos, Fingerprint: e.fingerprint, KVCompat: e.kvCompat,
	}); err != nil {
		return err
	}
	return nil
}

type badRequest string

func (b badRequest) Error() string { return string(b) }

// exportChunkTokens bounds one kv_chunk, so that positions from the prefix cache go out in pieces too.
const exportChunkTokens = 512

var exportBufs sync.Pool // *[]byte

func getBuf(n int) []byte {
	if p, ok := exportBufs.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

func putBuf(b []byte) { exportBufs.Put(&b) }

// exportProgress streams the positions computed since the last call, for every attention layer, and finishes the
// job when the whole prompt is out (the linear layers' states, then done). A sliding layer sends only the positions its window holds at the end of the
// prompt, [max(start_pos, L-W), L) (the kvwire package's rule); the ones before are never needed, and the cache
// may have evicted them already.
func (r *Runner) exportProgress(s *seq) {
	e := s.export
	layout := r.model.KVLayout()
	end := len(s.req.Prompt)
	for e.sent < s.prefilled {
		n := min(exportChunkTokens, s.prefilled-e.sent)
		for l := range layout.NumLayers() {
			from, to := e.sent, e.sent+n
			ly := layout.Layers[l]
			if ly.Kind == backend.KVLinear {
				continue // no positions: its state goes out once the prompt is done
			}
			if ly.Kind == backend.KVSliding {
				from = max(from, end-ly.Window)
			}
			if from >= to {
				continue
			}
			tb := layout.LayerTokenBytes(l)
			keys, values := getBuf((to-from)*tb), getBuf((to-from)*tb)
			if err := s.cache.ExportKV(l, from, to, keys, values); err != nil {
				putBuf(keys)
				putBuf(values)
				r.failExport(s, err)
				return
			}
			err := e.w.Chunk(kvwire.KVChunk{
				LayerIdx: l, NumTokens: to - from, NHeads: ly.KVHeads, HeadDim: ly.HeadDim, DType: e.dtype,
				Keys: keys, Values: values,
			}, func(c kvwire.KVChunk) { putBuf(c.Keys); putBuf(c.Values) })
			if err != nil {
				r.failExport(s, err) // the client left, or the writer failed
				return
			}
		}
		e.sent += n
	}
	if s.prefilled == len(s.req.Prompt) {
		if err := r.exportStates(s); err != nil {
			r.failExport(s, err)
			return
		}
		// Out of the batch (and the stats) before the client hears done, as finish does for a generation.
		r.endExport(s)
		// total_tokens counts the positions sent per full layer, as exo's server does: the prompt less start_pos
		// (a sliding layer may have sent fewer; a linear layer sends its state, which counts none).
		if err := e.w.Done(len(s.req.Prompt) - e.startPos); err != nil {
			r.cfg.Logger.Debug("KV export: the client did not get done", "request_id", s.req.ID, "error", err)
		} else {
			// Under the decode side's request id, which the KV request carries: one id across both nodes' logs.
			r.cfg.Logger.Debug("KV export done", "request_id", s.req.ID, "tokens", len(s.req.Prompt)-e.startPos,
				"start_pos", e.startPos, "took", time.Since(s.req.Arrived))
		}
	}
}

// exportStates sends one arrays_state per linear layer, in layer order, once the cache holds the whole prompt:
// the conv window and the recurrent state after [0, n), exactly the arrays of an mlx-lm ArraysCache (an exo peer
// assigns them wholesale). A state cannot be sliced, so it describes the whole prompt even when start_pos > 0;
// it goes out even when start_pos = n.
func (r *Runner) exportStates(s *seq) error {
	layout := r.model.KVLayout()
	for l, ly := range layout.Layers {
		if ly.Kind != backend.KVLinear {
			continue
		}
		dst := make([][]byte, len(ly.State))
		arrays := make([]kvwire.TensorBlob, len(ly.State))
		for i, spec := range ly.State {
			dt, err := kvwire.ParseDType(string(spec.DType))
			if err != nil {
				return err
			}
			dst[i] = getBuf(spec.Bytes())
			arrays[i] = kvwire.TensorBlob{DType: dt, Shape: slices.Clone(spec.Shape), Data: dst[i]}
		}
		err := s.cache.ExportState(l, dst)
		if err == nil {
			err = s.export.w.ArraysState(kvwire.ArraysState{LayerIdx: l, Arrays: arrays}) // copies the arrays
		}
		for _, b := range dst {
			putBuf(b)
		}
		if err != nil {
			return fmt.Errorf("linear layer %d: %w", l, err)
		}
	}
	return nil
}

// failExport ends a job with an error for the client (when it can still hear one).
func (r *Runner) failExport(s *seq, err error) {
	e := s.export
	code := kvwire.CodeInternal
	var bad badRequest
	switch {
	case errors.As(err, &bad):
		code = kvwire.CodeBadRequest
	case errors.Is(err, errShuttingDown):
		code = kvwire.CodeBusy
	}
	switch {
	case e.w != nil:
		if !errors.Is(err, kvwire.ErrJobAborted) && !errors.Is(err, context.Canceled) {
			_ = e.w.Error(code, err.Error())
		}
	case !errors.Is(err, kvwire.ErrJobExpired):
		_ = e.job.Reject(code, err.Error())
	}
	r.endExport(s)
}

// endExport takes a job out of the batch and gives its cache to the prefix cache.
func (r *Runner) endExport(s *seq) {
	r.active = slices.DeleteFunc(r.active, func(x *seq) bool { return x == s })
	if s.cache != nil {
		r.prefix.Insert(slices.Clone(s.req.Prompt[:s.cache.Len()]), s.cache)
		s.cache = nil
	}
	r.publish()
}
