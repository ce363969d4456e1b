package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// Remote asks for a request's prompt to be prefilled by another engine over the KV wire.
type Remote struct {
	// Endpoints are tried in order; on any failure the next one, then local prefill (unless Required).
	Endpoints []engine.PrefillEndpoint
	// Threshold is the least number of uncached prompt tokens worth a remote prefill.
	Threshold int
	// Required fails the request instead of prefilling locally when every endpoint failed.
	Required bool
	// ModelID and Fingerprint identify this instance's model; KV from a peer that reports another is refused,
	// unless the endpoint is Approximate and the peer reports this KVCompat.
	ModelID, Fingerprint, KVCompat string
	// Secret authenticates to peers that require it; Checksum asks for per-chunk CRC-32C.
	Secret   []byte
	Checksum bool
	// Timeout bounds each attempt; FrameTimeout bounds the wait for each frame (a stalled peer).
	Timeout, FrameTimeout time.Duration
}

// fetchResult is what a fetch goroutine reports to the loop.
type fetchResult struct {
	info *engine.RemotePrefill
	err  error
}

// fetch runs on its own goroutine while the sequence sits out of the batch: it fetches the KV of the prompt
// without its last token, positions [s.cached, n), into s.cache, trying each endpoint in turn. The loop does not
// touch s.cache meanwhile, so the cache is this goroutine's alone.
func (r *Runner) fetch(s *seq, rm *Remote) {
	n := len(s.req.Prompt) - 1
	info := &engine.RemotePrefill{Tokens: n - s.cached}
	var errs []error
	for _, ep := range rm.Endpoints {
		if s.ctx.Err() != nil {
			break
		}
		info.Attempts++
		info.Endpoint, info.InstanceID = ep.Address, ep.InstanceID
		start := time.Now()
		in := &ingest{r: r, s: s, rm: rm, n: n, start: start, approximate: ep.Approximate && rm.KVCompat != ""}
		ctx, cancel := context.WithTimeout(s.ctx, rm.Timeout)
		kvCompat := ""
		if in.approximate {
			kvCompat = rm.KVCompat
		}
		res, err := kvwire.Fetch(ctx, ep.Address, &kvwire.Request{
			RequestID: s.req.ID, ModelID: rm.ModelID, TokenIDs: s.req.Prompt[:n], StartPos: s.cached,
			Fingerprint: rm.Fingerprint, KVCompat: kvCompat,
		}, &kvwire.FetchOptions{Secret: rm.Secret, Checksum: rm.Checksum, FrameTimeout: rm.FrameTimeout, Timeout: rm.Timeout},
			kvwire.Handler{OnHeader: in.header, OnChunk: in.chunk, OnArraysState: in.arraysState})
		cancel()
		if err == nil {
			err = in.complete()
		}
		info.Bytes += res.TensorBytes
		info.Transfer, info.Ingest, info.Wait = time.Since(start), in.ingest, in.wait
		if err == nil {
			info.FallbackReason, info.Approximate = "", in.approximated
			s.fetched <- fetchResult{info: info}
			r.wakeLoop()
			return
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep.Address, err))
		s.cache.Truncate(s.cached) // drop what this attempt imported
		if got := s.cache.Len(); got < s.cached {
			// A cache with linear layers restores its newest cut at or below s.cached: its base, where it was
			// created or cloned, so normally s.cached itself; trust what it says rather than assume.
			s.cached, s.prefilled = got, got
		}
		if !s.cache.Restorable(s.cached) {
			// The attempt overwrote a sliding layer's window of the cached prefix: start from nothing.
			if c, err := r.model.NewCache(); err == nil {
				s.cache.Release()
				s.cache, s.cached, s.prefilled = c, 0, 0
			}
		}
		s.fetchBytes.Store(s.cache.Bytes())
	}
	if s.ctx.Err() != nil {
		errs = append(errs, s.ctx.Err())
	}
	err := errors.Join(errs...)
	if err == nil {
		err = errors.New("no prefill endpoint")
	}
	info.FallbackReason = err.Error()
	s.fetched <- fetchResult{info: info, err: err}
	r.wakeLoop()
}

// ingest checks a peer's KV before trusting it and writes it into the cache as it arrives.
type ingest struct {
	r        *Runner
	s        *seq
	rm       *Remote
	n        int // positions wanted: [s.cached, n)
	start    time.Time
	dtype    kvwire.DType // the peer's
	ours     kvwire.DType // the cache's
	layerPos []int        // full layers: the next position expected
	// window holds a sliding layer's chunks (in our dtype) until the end: they are placed at the end of the
	// prompt, whatever position the peer started them at (see the kvwire package's rule).
	window []slidingChunks
	// states marks the linear layers whose state arrived (at most one arrays_state each).
	states   []bool
	scratchS [][]byte
	scratchK []byte
	scratchV []byte
	ingest   time.Duration
	wait     time.Duration
	// approximate: the endpoint accepts another quantization's KV; approximated: the peer served one.
	approximate, approximated bool
}

func (in *ingest) header(h *kvwire.Header) error {
	if h.NumLayers == 0 {
		return nil // exo's shape of a failure: an error message follows, and Fetch returns it
	}
	l := in.r.model.KVLayout()
	switch {
	case h.Fingerprint != "" && in.rm.Fingerprint != "" && h.Fingerprint != in.rm.Fingerprint &&
		!(in.approximate && h.KVCompat == in.rm.KVCompat):
		return fmt.Errorf("peer serves another model: fingerprint %s, ours %s", h.Fingerprint, in.rm.Fingerprint)
	case h.Fingerprint == "" && h.ModelID != "" && h.ModelID != in.rm.ModelID &&
		!strings.HasSuffix(h.ModelID, "/"+in.rm.ModelID) && !strings.HasSuffix(in.rm.ModelID, "/"+h.ModelID):
		return fmt.Errorf("peer serves model %q, we asked for %q", h.ModelID, in.rm.ModelID)
	case h.NumLayers != l.NumLayers():
		return fmt.Errorf("peer's model has %d layers, ours %d", h.NumLayers, l.NumLayers())
	case h.StartPos != in.s.cached:
		return fmt.Errorf("peer starts at position %d, we asked for %d", h.StartPos, in.s.cached)
	}
	in.approximated = h.Fingerprint != "" && h.Fingerprint != in.rm.Fingerprint
	ours, err := kvwire.ParseDType(string(l.DType))
	if err != nil {
		return err
	}
	in.dtype, in.ours = h.DType, ours
	in.layerPos = make([]int, l.NumLayers())
	in.window = make([]slidingChunks, l.NumLayers())
	in.states = make([]bool, l.NumLayers())
	for i := range in.layerPos {
		in.layerPos[i] = in.s.cached
	}
	return nil
}

// slidingChunks are the positions a sliding layer received, oldest first: at most its window (older ones are
// dropped as newer arrive), so the memory is bounded by the window whatever the peer sends.
type slidingChunks struct {
	keys, values [][]byte
	count        int // positions in keys
	received     int // positions received, dropped ones included
}

// add appends one chunk of n positions (tb bytes each) and drops the oldest positions beyond window.
func (w *slidingChunks) add(keys, values []byte, n, tb, window int) {
	w.keys, w.values = append(w.keys, slices.Clone(keys)), append(w.values, slices.Clone(values))
	w.count += n
	w.received += n
	for w.count > window {
		drop := min(w.count-window, len(w.keys[0])/tb)
		w.keys[0], w.values[0] = w.keys[0][drop*tb:], w.values[0][drop*tb:]
		w.count -= drop
		if len(w.keys[0]) == 0 {
			w.keys, w.values = w.keys[1:], w.values[1:]
		}
	}
}

func (in *ingest) chunk(c *kvwire.KVChunk) error {
	if in.wait == 0 {
		in.wait = time.Since(in.start)
	}
	l := in.r.model.KVLayout()
	switch {
	case in.layerPos == nil:
		return errors.New("a chunk came before a header with layers")
	case c.LayerIdx < 0 || c.LayerIdx >= l.NumLayers():
		return fmt.Errorf("chunk for layer %d of %d", c.LayerIdx, l.NumLayers())
	case l.Layers[c.LayerIdx].Kind == backend.KVLinear:
		return &StateError{Layer: c.LayerIdx, Reason: "a kv_chunk came for a linear-attention layer, which holds a state and no positions"}
	case c.NHeads != l.Layers[c.LayerIdx].KVHeads || c.HeadDim != l.Layers[c.LayerIdx].HeadDim:
		return fmt.Errorf("chunk of %d heads × %d, our model has %d × %d", c.NHeads, c.HeadDim, l.Layers[c.LayerIdx].KVHeads, l.Layers[c.LayerIdx].HeadDim)
	case c.DType != in.dtype:
		return fmt.Errorf("chunk dtype %s differs from the header's %s", c.DType, in.dtype)
	case l.Layers[c.LayerIdx].Kind == backend.KVSliding && in.window[c.LayerIdx].received+c.NumTokens > in.n:
		return fmt.Errorf("chunks for sliding layer %d hold %d positions, more than the %d of the prompt", c.LayerIdx, in.window[c.LayerIdx].received+c.NumTokens, in.n)
	case l.Layers[c.LayerIdx].Kind != backend.KVSliding && in.layerPos[c.LayerIdx]+c.NumTokens > in.n:
		return fmt.Errorf("chunk for layer %d runs to position %d, past the %d asked for", c.LayerIdx, in.layerPos[c.LayerIdx]+c.NumTokens, in.n)
	}
	want := c.NumTokens * c.NHeads * c.HeadDim * c.DType.Size()
	if len(c.Keys) != want || len(c.Values) != want {
		return fmt.Errorf("chunk holds %d and %d bytes, want %d each", len(c.Keys), len(c.Values), want)
	}
	keys, values := c.Keys, c.Values
	if c.DType != in.ours {
		// The peer's cache has another dtype: convert (widening is exact, narrowing rounds to nearest even).
		size := kvwire.ConvertedLen(len(keys), c.DType, in.ours)
		in.scratchK, in.scratchV = grow(in.scratchK, size), grow(in.scratchV, size)
		if err := kvwire.Convert(in.scratchK, in.ours, keys, c.DType); err != nil {
			return err
		}
		if err := kvwire.Convert(in.scratchV, in.ours, values, c.DType); err != nil {
			return err
		}
		keys, values = in.scratchK, in.scratchV
	}
	if ly := l.Layers[c.LayerIdx]; ly.Kind == backend.KVSliding {
		in.window[c.LayerIdx].add(keys, values, c.NumTokens, l.LayerTokenBytes(c.LayerIdx), ly.Window)
		return nil
	}
	t0 := time.Now()
	err := in.s.cache.ImportKV(c.LayerIdx, in.layerPos[c.LayerIdx], keys, values)
	in.ingest += time.Since(t0)
	in.s.fetchBytes.Store(in.s.cache.Bytes())
	if err != nil {
		return fmt.Errorf("import into the cache: %w", err)
	}
	in.layerPos[c.LayerIdx] += c.NumTokens
	return nil
}

// StateError is why a peer's message about a linear-attention layer was refused (kvwire's arrays_state, or a
// kv_chunk where a state belongs): the fetch fails and the prompt is prefilled locally, as for any bad KV.
type StateError struct {
	Layer  int
	Reason string
}

func (e *StateError) Error() string { return fmt.Sprintf("layer %d: %s", e.Layer, e.Reason) }

// arraysState imports a linear layer's state: the conv window and the recurrent state after the whole prompt
// [0, n), whatever start_pos was (a state cannot be sliced). Any order relative to the kv_chunks is accepted: duet
// sends states last, exo in layer order. The conv window may come in any of the three dtypes (it is converted to
// the cache's, rounding as kv_chunks do); the state is float32, widened if a peer sends it in 16 bits. Other
// shapes (a vLLM peer's) are refused.
func (in *ingest) arraysState(a *kvwire.ArraysState) error {
	if in.wait == 0 {
		in.wait = time.Since(in.start)
	}
	l := in.r.model.KVLayout()
	switch {
	case in.layerPos == nil:
		return errors.New("an arrays_state came before a header with layers")
	case a.LayerIdx < 0 || a.LayerIdx >= l.NumLayers():
		return fmt.Errorf("arrays_state for layer %d of %d", a.LayerIdx, l.NumLayers())
	case l.Layers[a.LayerIdx].Kind != backend.KVLinear:
		return &StateError{Layer: a.LayerIdx, Reason: fmt.Sprintf("an arrays_state came for a %s attention layer", l.Layers[a.LayerIdx].Kind)}
	case in.states[a.LayerIdx]:
		return &StateError{Layer: a.LayerIdx, Reason: "a second arrays_state"}
	}
	specs := l.Layers[a.LayerIdx].State
	if len(a.Arrays) != len(specs) {
		return &StateError{Layer: a.LayerIdx, Reason: fmt.Sprintf("arrays_state holds %d arrays, want %d", len(a.Arrays), len(specs))}
	}
	if len(in.scratchS) < len(specs) {
		in.scratchS = make([][]byte, len(specs))
	}
	src := make([][]byte, len(specs))
	for i, spec := range specs {
		b := &a.Arrays[i]
		ours, err := kvwire.ParseDType(string(spec.DType))
		if err != nil {
			return err
		}
		switch {
		case !slices.Equal(b.Shape, spec.Shape):
			return &StateError{Layer: a.LayerIdx, Reason: fmt.Sprintf("array %d has shape %v, want %v", i, b.Shape, spec.Shape)}
		case len(b.Data) != spec.Elems()*b.DType.Size():
			return &StateError{Layer: a.LayerIdx, Reason: fmt.Sprintf("array %d holds %d bytes, its shape needs %d of %s", i, len(b.Data), spec.Elems()*b.DType.Size(), b.DType)}
		}
		if b.DType == ours {
			src[i] = b.Data
			continue
		}
		// Widening to float32 is exact; narrowing the conv window rounds to nearest even, as a kv_chunk's does.
		in.scratchS[i] = grow(in.scratchS[i], kvwire.ConvertedLen(len(b.Data), b.DType, ours))
		if err := kvwire.Convert(in.scratchS[i], ours, b.Data, b.DType); err != nil {
			return &StateError{Layer: a.LayerIdx, Reason: fmt.Sprintf("array %d: %v", i, err)}
		}
		src[i] = in.scratchS[i]
	}
	t0 := time.Now()
	err := in.s.cache.ImportState(a.LayerIdx, in.n, src)
	in.ingest += time.Since(t0)
	in.s.fetchBytes.Store(in.s.cache.Bytes())
	if err != nil {
		return fmt.Errorf("import into the cache: %w", err)
	}
	in.states[a.LayerIdx] = true
	in.layerPos[a.LayerIdx] = in.n
	return nil
}

// complete places each sliding layer's positions at the end of the prompt, then checks that every full layer
// received every position and that every sliding layer holds what the first decode query sees.
func (in *ingest) complete() error {
	if in.layerPos == nil {
		return errors.New("the peer sent no header")
	}
	l := in.r.model.KVLayout()
	for i, ly := range l.Layers {
		if ly.Kind != backend.KVSliding {
			continue
		}
		w := &in.window[i]
		// End-anchored: the m positions received are [n-m, n), whether the peer started at start_pos (duet) or
		// sent the whole window it holds (exo).
		from := in.n - w.count
		t0 := time.Now()
		for j := range w.keys {
			if err := in.s.cache.ImportKV(i, from, w.keys[j], w.values[j]); err != nil {
				return fmt.Errorf("import into the cache: %w", err)
			}
			from += len(w.keys[j]) / l.LayerTokenBytes(i)
		}
		in.ingest += time.Since(t0)
		in.s.fetchBytes.Store(in.s.cache.Bytes())
		if w.count == 0 && in.n > in.s.cached {
			// Nothing arrived: the layer still ends where the cached prefix does.
			return fmt.Errorf("sliding layer %d received no positions", i)
		}
		in.layerPos[i] = in.n
	}
	for i, ly := range l.Layers {
		if ly.Kind == backend.KVLinear && !in.states[i] {
			return &StateError{Layer: i, Reason: "no arrays_state came for this linear-attention layer"}
		}
	}
	for l, p := range in.layerPos {
		if p != in.n {
			return fmt.Errorf("layer %d ends at position %d, want %d", l, p, in.n)
		}
	}
	if got := in.s.cache.Len(); got != in.n {
		return fmt.Errorf("the cache holds %d positions after the transfer, want %d", got, in.n)
	}
	if !in.s.cache.Restorable(in.n) {
		return fmt.Errorf("a sliding layer did not receive the window the next position sees")
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
