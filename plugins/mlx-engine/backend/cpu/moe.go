package cpu

import (
	"fmt"
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// Mixture of experts (docs/models-design.md §1.2 and §5.1). A step's rows are routed, then grouped by expert,
// so that each chosen expert's matrices are read once per step whatever the number of rows that chose it, and
// experts no row chose are never read: a decode step reads k experts per layer, a prefill chunk at most all of
// them once. Every output row is computed by the same kernels as a dense linear (one accumulator per output,
// summed in index order) and reduced over its experts in ascending expert order, so a row's bits do not depend
// on which other rows share the step, how the step is chunked or how many workers run it.

// moeLayer is a sparse feed-forward block prepared for the CPU.
type moeLayer struct {
	spec           model.MoESpec
	act            activation
	router         linear
	gate, up, down []linear // per expert: [I, H], [I, H], [H, I], each with its expert's bias when the file has them
	// gateUp replaces gate and up when the file fuses them (gpt-oss): per expert [2I, H], computed as one matrix
	// (each output is the same dot product either way) and split by the activation, rows interleaved (gate, up,
	// gate, up, ...) when interleaved holds, else I gate rows then I up rows. No copy of the weights is made.
	gateUp      []linear
	interleaved bool
	// shared is qwen2_moe's always-on expert (gate, up, down), nil without one; sharedGate its [1, H] gate.
	shared     *[3]linear
	sharedGate *linear
}

// moeScratch holds one MoE step's activations, reused across layers and steps.
type moeScratch struct {
	logits       []float32 // [rows, E]
	probs        []float32 // per worker: [E]
	ids          []int32   // [rows, k]: the chosen experts, ascending
	weights      []float32 // [rows, k]
	count, start []int     // per expert: how many (row, slot) pairs chose it, and where its group starts
	fill         []int     // per expert: the grouping's cursor
	pos          []int32   // [rows, k]: the pair's index in grouped order
	xg           []float32 // [rows·k, H]: inputs in grouped order
	g, u         []float32 // [rows·k, I]
	gu           []float32 // [rows·k, 2I]: fused gate and up outputs
	exp          []int32   // [rows·k]: the expert of each grouped pair
	yg           []float32 // [rows·k, H]: expert outputs in grouped order
	sg, su, sl   []float32 // shared expert: [rows, SI], [rows, SI], [rows] gate logits
	sy           []float32 // [rows, H]
	tasks        []moeTask
}

// moeTask is one parallel unit: outputs [o0, o1) of one expert's matrix over all the rows that chose it.
type moeTask struct {
	e, o0, o1 int
	w         *linear
	y, x      []float32
}

// moeSupported reports whether the CPU backend computes the sparse block of f: either router order, with or
// without per-expert biases, experts of any activation newActivation knows.
func moeSupported(f *model.FFNSpec) error {
	s := f.MoE
	if s == nil {
		return fmt.Errorf("mixture of experts without a spec")
	}
	if s.Order != model.SoftmaxThenTopK && s.Order != model.TopKThenSoftmax {
		return fmt.Errorf("mixture of experts with router order %d", s.Order)
	}
	_, err := newActivation(f)
	return err
}

// prepareMoE prepares a sparse block's matrices as prepare does a dense one's: each expert from its view of the
// file (Experts.Each), so stacked and per-expert files give the same matrices.
func (m *cpuModel) prepareMoE(src *model.MoE, ffn *model.FFNSpec) (*moeLayer, error) {
	if err := moeSupported(ffn); err != nil {
		return nil, err
	}
	spec := ffn.MoE
	fused := src.GateUp != nil
	if src.Down == nil || (!fused && (src.Gate == nil || src.Up == nil)) {
		return nil, fmt.Errorf("%s: the experts' gate, up or down matrices are missing", src.Router.Name)
	}
	l := &moeLayer{spec: *spec, interleaved: src.Interleaved}
	var err error
	if l.act, err = newActivation(ffn); err != nil {
		return nil, err
	}
	one := func(dst *linear, s *model.Linear) {
		if err != nil {
			return
		}
		if *dst, err = m.prepare(s); err == nil && s.Bias != nil {
			dst.bias, err = model.Vector(s.Bias)
		}
	}
	one(&l.router, src.Router)
	type experts struct {
		dst *[]linear
		src *model.Experts
	}
	all := []experts{{&l.down, src.Down}}
	if fused {
		all = append(all, experts{&l.gateUp, src.GateUp})
	} else {
		all = append(all, experts{&l.gate, src.Gate}, experts{&l.up, src.Up})
	}
	for _, p := range all {
		if p.src.E != spec.Experts || len(p.src.Each) != spec.Experts {
			return nil, fmt.Errorf("%s: %d experts, the config has %d", p.src.Name, len(p.src.Each), spec.Experts)
		}
		*p.dst = make([]linear, p.src.E)
		for e := range p.src.Each {
			one(&(*p.dst)[e], &p.src.Each[e])
		}
		if p.src.Bias == nil || err != nil {
			continue
		}
		// The experts' biases [E, Out], one slice per expert.
		var b []float32
		if b, err = model.Vector(p.src.Bias); err == nil && len(b) != p.src.E*p.src.Out {
			err = fmt.Errorf("%s: bias of %d values for %d experts of %d outputs", p.src.Name, len(b), p.src.E, p.src.Out)
		}
		for e := range *p.dst {
			if err == nil {
				(*p.dst)[e].bias = b[e*p.src.Out : (e+1)*p.src.Out : (e+1)*p.src.Out]
			}
		}
	}
	if s := src.Shared; s != nil {
		l.shared = &[3]linear{}
		one(&l.shared[0], s.Gate)
		one(&l.shared[1], s.Up)
		one(&l.shared[2], s.Down)
	}
	if src.SharedGate != nil {
		l.sharedGate = &linear{}
		one(l.sharedGate, src.SharedGate)
	}
	return l, err
}

// moeExpandedBytes is what expanding a sparse block's matrices to float32 takes (expandedBytes).
func moeExpandedBytes(e *model.MoE, add func(*model.Linear)) {
	add(e.Router)
	for _, x := range []*model.Experts{e.Gate, e.Up, e.GateUp, e.Down} {
		if x != nil {
			for i := range x.Each {
				add(&x.Each[i])
			}
		}
	}
	if s := e.Shared; s != nil {
		add(s.Gate)
		add(s.Up)
		add(s.Down)
	}
	if e.SharedGate != nil {
		add(e.SharedGate)
	}
}

// moe computes the sparse block L over rows of x ([rows, H], normalised) into y ([rows, H]).
func (m *cpuModel) moe(L *moeLayer, x, y []float32, rows int) {
	h := m.cfg.HiddenSize
	sp := &L.spec
	E, k, inter := sp.Experts, sp.TopK, sp.Intermediate
	s := &m.moeScratch
	s.logits = grow(s.logits, rows*E)
	m.matmul(x, rows, mm{s.logits, &L.router})

	// Routing: per row, the spec's order of softmax and top k (route, routeTopK), then sorted by expert.
	s.ids = growInt32(s.ids, rows*k)
	s.weights = grow(s.weights, rows*k)
	s.probs = grow(s.probs, m.pool.workers*E)
	m.pool.run(rows, 8, func(worker, lo, hi int) {
		p := s.probs[worker*E : (worker+1)*E]
		for r := lo; r < hi; r++ {
			l := s.logits[r*E : (r+1)*E]
			addBias(l, L.router.bias)
			if sp.Order == model.TopKThenSoftmax {
				routeTopK(l, s.ids[r*k:(r+1)*k], s.weights[r*k:(r+1)*k])
			} else {
				route(l, p, sp.NormTopK, s.ids[r*k:(r+1)*k], s.weights[r*k:(r+1)*k])
			}
		}
	})

	// Group the (row, slot) pairs by expert, in row order within an expert, and gather their inputs.
	s.count, s.start = growInt(s.count, E), growInt(s.start, E)
	clear(s.count)
	for _, e := range s.ids[:rows*k] {
		s.count[e]++
	}
	n := 0
	for e := range E {
		s.start[e] = n
		n += s.count[e]
	}
	s.pos = growInt32(s.pos, rows*k)
	s.fill = growInt(s.fill, E)
	fill := s.fill
	clear(fill)
	for i, e := range s.ids[:rows*k] {
		s.pos[i] = int32(s.start[e] + fill[e])
		fill[e]++
	}
	s.xg = grow(s.xg, n*h)
	s.g, s.u = grow(s.g, n*inter), grow(s.u, n*inter)
	s.yg = grow(s.yg, n*h)
	m.pool.run(rows*k, 16, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			r, p := i/k, int(s.pos[i])
			copy(s.xg[p*h:(p+1)*h], x[r*h:(r+1)*h])
		}
	})

	// Gate and up of every chosen expert over its rows (or the fused matrix), the activation with the experts'
	// biases, then down and its bias.
	s.exp = growInt32(s.exp, n)
	for e := range E {
		for p := s.start[e]; p < s.start[e]+s.count[e]; p++ {
			s.exp[p] = int32(e)
		}
	}
	chunk := taskRows(rows) // output rows per task, as matmul
	s.tasks = s.tasks[:0]
	fused := L.gateUp != nil
	if fused {
		s.gu = grow(s.gu, n*2*inter)
	}
	for e := range E {
		c, st := s.count[e], s.start[e]
		if c == 0 {
			continue
		}
		xe := s.xg[st*h : (st+c)*h]
		if fused {
			for o := 0; o < 2*inter; o += chunk {
				s.tasks = append(s.tasks, moeTask{e: e, o0: o, o1: min(o+chunk, 2*inter), w: &L.gateUp[e],
					y: s.gu[st*2*inter : (st+c)*2*inter], x: xe})
			}
			continue
		}
		for o := 0; o < inter; o += chunk {
			s.tasks = append(s.tasks,
				moeTask{e: e, o0: o, o1: min(o+chunk, inter), w: &L.gate[e], y: s.g[st*inter : (st+c)*inter], x: xe},
				moeTask{e: e, o0: o, o1: min(o+chunk, inter), w: &L.up[e], y: s.u[st*inter : (st+c)*inter], x: xe})
		}
	}
	m.runTasks(s.tasks)
	m.pool.run(n, 4, func(_, lo, hi int) {
		for p := lo; p < hi; p++ {
			e := s.exp[p]
			g, u := s.g[p*inter:(p+1)*inter], s.u[p*inter:(p+1)*inter]
			if fused {
				splitGateUp(g, u, s.gu[p*2*inter:(p+1)*2*inter], L.gateUp[e].bias, L.interleaved)
			} else {
				addBias(g, L.gate[e].bias)
				addBias(u, L.up[e].bias)
			}
			L.act.apply(m.kern, g, u)
		}
	})
	s.tasks = s.tasks[:0]
	for e := range E {
		c, st := s.count[e], s.start[e]
		if c == 0 {
			continue
		}
		for o := 0; o < h; o += chunk {
			s.tasks = append(s.tasks, moeTask{e: e, o0: o, o1: min(o+chunk, h), w: &L.down[e],
				y: s.yg[st*h : (st+c)*h], x: s.g[st*inter : (st+c)*inter]})
		}
	}
	m.runTasks(s.tasks)
	if L.down[0].bias != nil {
		m.pool.run(n, 16, func(_, lo, hi int) {
			for p := lo; p < hi; p++ {
				addBias(s.yg[p*h:(p+1)*h], L.down[s.exp[p]].bias)
			}
		})
	}

	if sh := L.shared; sh != nil {
		si := sh[0].out
		s.sg, s.su, s.sy = grow(s.sg, rows*si), grow(s.su, rows*si), grow(s.sy, rows*h)
		jobs := []mm{{s.sg, &sh[0]}, {s.su, &sh[1]}}
		if L.sharedGate != nil {
			s.sl = grow(s.sl, rows)
			jobs = append(jobs, mm{s.sl, L.sharedGate})
		}
		m.matmul(x, rows, jobs...)
		m.pool.run(rows, 4, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				siluMul(m.kern, s.sg[r*si:(r+1)*si], s.su[r*si:(r+1)*si])
			}
		})
		m.matmul(s.sg, rows, mm{s.sy, &sh[2]})
	}

	// Reduce: y = Σ over the row's experts in ascending order of w·expert(x), plus σ(gate·x)·shared(x).
	m.pool.run(rows, 8, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := y[r*h : (r+1)*h]
			clear(yr)
			for j := range k {
				w := s.weights[r*k+j]
				p := int(s.pos[r*k+j])
				ye := s.yg[p*h : (p+1)*h]
				for d := range yr {
					yr[d] += float32(w * ye[d])
				}
			}
			if L.shared == nil {
				continue
			}
			g := float32(1)
			if L.sharedGate != nil {
				g = sigmoid(s.sl[r])
			}
			ys := s.sy[r*h : (r+1)*h]
			for d := range yr {
				yr[d] += float32(g * ys[d])
			}
		}
	})
}

// runTasks runs tasks over the pool, each one as matmul runs a chunk of one matrix.
func (m *cpuModel) runTasks(tasks []moeTask) {
	m.pool.run(len(tasks), 1, func(worker, lo, hi int) {
		for _, t := range tasks[lo:hi] {
			m.rowsTask(worker, t.y, t.x, len(t.x)/t.w.in, t.w, t.o0, t.o1)
		}
	})
}

// rowsTask computes outputs [o0, o1) of w over rows of x into y ([rows, w.out]) with the kernels matmul picks
// for such a task, so an expert's product is what a dense linear of the same weights gives.
func (m *cpuModel) rowsTask(worker int, y, x []float32, rows int, w *linear, o0, o1 int) {
	in := w.in
	if w.w == nil && rows <= storedVecRows && w.st.vecOK(m.kern, in) {
		w.st.vecRowsBatch(m.kern, y, x, rows, in, w.out, o0, o1)
		return
	}
	ww := w.w
	if ww == nil {
		ws := &m.work[worker]
		ws.tile = grow(ws.tile, (o1-o0)*in)
		for o := o0; o < o1; o++ {
			w.src.Row(o, ws.tile[(o-o0)*in:(o-o0+1)*in])
		}
		ww = ws.tile[:(o1-o0)*in]
	} else {
		ww = ww[o0*in : o1*in]
	}
	matmulRows(m.kern, y, x, ww, rows, in, w.out, o0, o1)
}

// route picks a row's experts from its router logits l: p = softmax(l) in float32 (max subtracted, the sum
// in ascending expert order), the k largest p with ties to the lower index, divided by their sum when norm
// holds; ids and weights come out sorted by expert.
func route(l, p []float32, norm bool, ids []int32, weights []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range l {
		mx = max(mx, v)
	}
	var sum float32
	for i, v := range l {
		p[i] = float32(math.Exp(float64(v - mx)))
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	k := len(ids)
	for j := range k {
		best := -1
		for i, v := range p {
			if taken(ids[:j], i) {
				continue
			}
			if best < 0 || v > p[best] {
				best = i
			}
		}
		ids[j], weights[j] = int32(best), p[best]
	}
	if norm {
		var t float32
		for _, w := range weights {
			t += w
		}
		for j := range weights {
			weights[j] /= t
		}
	}
	for j := 1; j < k; j++ { // insertion sort by expert: k is small
		for i := j; i > 0 && ids[i] < ids[i-1]; i-- {
			ids[i], ids[i-1] = ids[i-1], ids[i]
			weights[i], weights[i-1] = weights[i-1], weights[i]
		}
	}
}

// routeTopK picks a row's experts from its router logits l as gpt-oss does: the k largest logits (ties to
// the lower index), softmaxed over those k in float32 (max subtracted, exp in float64 rounded, the sum in
// ascending expert order); ids and weights come out sorted by expert.
func routeTopK(l []float32, ids []int32, weights []float32) {
	k := len(ids)
	for j := range k {
		best := -1
		for i, v := range l {
			if taken(ids[:j], i) {
				continue
			}
			if best < 0 || v > l[best] {
				best = i
			}
		}
		ids[j] = int32(best)
	}
	for j := 1; j < k; j++ { // insertion sort by expert: k is small
		for i := j; i > 0 && ids[i] < ids[i-1]; i-- {
			ids[i], ids[i-1] = ids[i-1], ids[i]
		}
	}
	mx := float32(math.Inf(-1))
	for _, e := range ids {
		mx = max(mx, l[e])
	}
	var sum float32
	for j, e := range ids {
		weights[j] = float32(math.Exp(float64(l[e] - mx)))
		sum += weights[j]
	}
	for j := range weights {
		weights[j] /= sum
	}
}

// splitGateUp writes a fused expert's outputs gu ([2I]) plus its bias b (optional) into g and u ([I] each):
// gu's even and odd entries when interleaved, else its first and second halves.
func splitGateUp(g, u, gu, b []float32, interleaved bool) {
	n := len(g)
	gi := func(j int) (int, int) {
		if interleaved {
			return 2 * j, 2*j + 1
		}
		return j, n + j
	}
	for j := range n {
		a, c := gi(j)
		gv, uv := gu[a], gu[c]
		if b != nil {
			gv, uv = gv+b[a], uv+b[c]
		}
		g[j], u[j] = gv, uv
	}
}

func taken(ids []int32, i int) bool {
	for _, e := range ids {
		if int(e) == i {
			return true
		}
	}
	return false
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func growInt(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
