package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// Where the pair of instances comes from, and how it lives through the phases in exo's order (the prefill
// instance alone, then both linked, then the decode instance alone):
//   - --local: two duet processes; the decode node starts after prefill_alone, and the prefill instance is
//     unloaded before decode_alone.
//   - --url --create: instances the benchmark loads on two nodes of a running cluster at the same points, of a
//     model no other instance serves (else the router would send it the phases' requests or prefills); both
//     are unloaded at the end.
//   - --url alone: two instances the cluster already serves, named or picked by role and node. Both are up
//     from the start: prefill_alone runs only when the decode instance cannot prefill (role decode), and
//     decode_alone only with --allow-unload.

// close removes the link the benchmark made, unloads the instances it loaded and stops the nodes it started.
func (b *pdBench) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.ensureAutoRouter(ctx, false); err != nil {
		b.prog.logf("%v", err)
	}
	if b.linkID != "" {
		if err := b.api.at(b.d.URL).DeleteLink(ctx, b.linkID); err != nil {
			b.prog.logf("removing the benchmark's instance link %s: %v", b.linkID, err)
		}
	}
	if b.nodes == nil {
		for _, id := range b.owned {
			if id == b.p.ID && b.prefillUnloaded {
				continue
			}
			if err := b.api.at(b.base).DeleteInstance(ctx, id); err != nil {
				b.prog.logf("unloading the benchmark's instance %s: %v", id, err)
			}
		}
	}
	var wg sync.WaitGroup
	for _, n := range b.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.stop() }()
	}
	wg.Wait()
	if b.root != "" {
		os.RemoveAll(b.root)
	}
}

// calibrateArgs has a local node measure its instance's speed once loaded, for phase auto's router (which
// otherwise knows only what the phases before it ran: the decode instance never prefilled by itself).
func (b *pdBench) calibrateArgs() []string {
	if !b.o.Auto {
		return nil
	}
	return []string{"--pd-calibrate-tokens", "512"}
}

func (b *pdBench) sideSummary(s side, role int) SideSummary {
	out := SideSummary{InstanceID: s.ID, Node: s.Node, Model: s.Model, Backend: s.Backend, Engine: s.Engine, URL: s.URL,
		KVEndpoint: s.KVEndpoint, ContextLength: s.ContextLength}
	if s.KV != nil {
		out.KVBytesPerTok, out.KVStateBytes = s.KV.BytesPerToken, s.KV.StateBytes
	}
	if b.o.Local {
		if cpus, want, _ := parseCPUs(b.o.CPUs); want && strings.HasPrefix(b.report.Setup.Pinning, "pinned") {
			cpu := cpus[role]
			out.CPU = &cpu
		}
	}
	if b.o.Local || b.o.Create {
		out.EngineOptions = b.engineOptions(role)
	}
	return out
}

// threshold is the remote-prefill threshold of the instances the benchmark starts: exo's 1000, or less so
// that the shortest prompt (--allow-short) still qualifies while the isolation stream's prompt does not.
func (o PDOptions) threshold() int {
	shortest := slices.Min(o.PP)
	if o.Isolation && o.IsolationPP > 0 {
		shortest = min(shortest, o.IsolationPP)
	}
	return min(1000, shortest/2)
}

// engineOptions are the load options of an instance the benchmark starts: no prefix cache (exo's bench
// endpoint disables it; the prompts share no prefix anyway), one compute thread on a pinned node, the decode
// side's threshold and KV wire deadlines, then the user's options, which win.
func (b *pdBench) engineOptions(role int) options {
	o := options{"prefix_cache_mb": "0"}
	if b.o.Local && strings.HasPrefix(b.report.Setup.Pinning, "pinned") {
		o["threads"] = "1" // the node has one CPU (see startNode)
	}
	if role == 0 {
		maps.Copy(o, b.o.PrefillOpts)
		return o
	}
	o["remote_prefill_threshold"] = strconv.Itoa(b.o.threshold())
	// A slow prefill node (one core of pure Go) can take longer than the KV wire's 30 s frame deadline for
	// one prefill step of a long prompt (2048 tokens when it prefills nothing else) and than the 2 m bound of
	// a whole remote prefill: the decode side would give up and prefill locally, which is not what
	// disaggregated measures.
	o["kv_frame_timeout"] = "5m"
	o["remote_prefill_timeout"] = time.Duration(b.o.Timeout).String()
	maps.Copy(o, b.o.DecodeOpts)
	return o
}

// setupLocal starts the prefill node; the decode node starts after prefill_alone.
func (b *pdBench) setupLocal(ctx context.Context) error {
	o := b.o
	root, err := os.MkdirTemp("", "duet-bench-pd-")
	if err != nil {
		return err
	}
	b.root = root
	exe, err := executable(o.Exe)
	if err != nil {
		return err
	}
	decodeModel, note, err := localModel(o.Model, root)
	if err != nil {
		return err
	}
	prefillModel := decodeModel
	if o.PrefillModel != "" && o.PrefillModel != o.Model {
		if prefillModel, _, err = localModel(o.PrefillModel, root); err != nil {
			return err
		}
	}
	b.report.Setup.ModelNote = note
	secret, err := writeSecret(root)
	if err != nil {
		return err
	}
	cpus, want, _ := parseCPUs(o.CPUs)
	pin := pinPlan(cpus, want)
	thr := o.threshold()
	b.report.Setup.Local, b.report.Setup.Pinning, b.report.Setup.Threshold = true, pin.note, thr
	b.prog.logf("%s", pin.note)
	env := []string{"DUET_DISAGG_PREFILL_THRESHOLD=" + strconv.Itoa(thr)}
	b.prog.logf("starting the prefill node on 127.0.0.1 (model %s)", o.Model)
	pn, err := startNode(ctx, exe, root, nodeSpec{Name: "prefill", Host: "127.0.0.1", CPU: pin.cpus[0], Env: env,
		Args: append(append([]string{"--model", prefillModel, "--cluster-secret-file", secret}, b.calibrateArgs()...), engineOptArgs(b.engineOptions(0))...)}, pin, "")
	if err != nil {
		return err
	}
	b.nodes = append(b.nodes, pn)
	pid, err := nodeID(ctx, b.api, pn.URL)
	if err != nil {
		return err
	}
	p, err := oneReady(ctx, b.api, pn.URL, pid, time.Duration(o.SettleTimeout))
	if err != nil {
		return errors.Join(err, pn.alive())
	}
	if p.KVEndpoint == "" {
		return fmt.Errorf("the prefill node's instance %s serves no KV", p.ID)
	}
	b.p, b.base, b.unloadable = side{p, pn.URL}, pn.URL, true
	b.startDecode = func(ctx context.Context) error {
		host := secondLoopback()
		b.prog.note("starting the decode node on %s, joining the prefill node", host)
		dn, err := startNode(ctx, exe, root, nodeSpec{Name: "decode", Host: host, CPU: pin.cpus[1], Env: env,
			Args: append(append([]string{"--model", decodeModel, "--cluster-secret-file", secret}, b.calibrateArgs()...), engineOptArgs(b.engineOptions(1))...)}, pin, pn.Gossip)
		if err != nil {
			return err
		}
		b.nodes = append(b.nodes, dn)
		did, err := nodeID(ctx, b.api, dn.URL)
		if err != nil {
			return err
		}
		d, err := oneReady(ctx, b.api, dn.URL, did, time.Duration(o.SettleTimeout))
		if err != nil {
			return errors.Join(err, dn.alive())
		}
		b.d = side{d, dn.URL}
		return b.waitVisible(ctx, []string{b.p.ID, b.d.ID})
	}
	return nil
}

// waitVisible waits until both gateways of the pair see every instance given ready.
func (b *pdBench) waitVisible(ctx context.Context, ids []string) error {
	return waitUntil(ctx, time.Duration(b.o.SettleTimeout), "both nodes to see "+strings.Join(ids, " and ")+" ready", func() (bool, error) {
		for _, n := range b.nodes {
			if err := n.alive(); err != nil {
				return false, err
			}
		}
		for _, base := range []string{b.p.URL, b.d.URL} {
			ins, err := b.api.at(base).Instances(ctx)
			if err != nil {
				return false, err
			}
			for _, id := range ids {
				if !slices.ContainsFunc(ins, func(in instance) bool { return in.ID == id && in.Status == "ready" }) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// unload unloads an instance and waits until the decode node no longer lists it.
func (b *pdBench) unload(ctx context.Context, id string) error {
	if err := b.api.at(b.d.URL).DeleteInstance(ctx, id); err != nil {
		return err
	}
	return waitUntil(ctx, time.Duration(b.o.SettleTimeout), "instance "+id+" to be gone", func() (bool, error) {
		ins, err := b.api.at(b.d.URL).Instances(ctx)
		return err == nil && !slices.ContainsFunc(ins, func(in instance) bool { return in.ID == id }), err
	})
}

// nodeURLs maps the cluster's alive nodes to their gateways' URLs, from base's /state.
func (b *pdBench) nodeURLs(ctx context.Context, base string) (map[string]string, []string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, nil, fmt.Errorf("--url: %v", err)
	}
	st, err := b.api.at(base).State(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	var alive []string
	for _, n := range st.Nodes {
		if n.Status == "alive" && n.ID != "" {
			alive = append(alive, n.ID)
			if n.Tags.APIAddr != "" {
				out[n.ID] = u.Scheme + "://" + n.Tags.APIAddr
			}
		}
	}
	if st.Local != "" {
		out[st.Local] = base
	}
	sort.Strings(alive)
	return out, alive, nil
}

// setupExisting picks two instances the cluster serves.
func (b *pdBench) setupExisting(ctx context.Context) error {
	o := b.o
	b.base = strings.TrimRight(o.URL, "/")
	ins, err := b.api.at(b.base).Instances(ctx)
	if err != nil {
		return err
	}
	urls, _, err := b.nodeURLs(ctx, b.base)
	if err != nil {
		return err
	}
	p, d, err := pickPair(ins, o)
	if err != nil {
		return err
	}
	b.p, b.d = side{p, urls[p.Node]}, side{d, urls[d.Node]}
	for _, s := range []side{b.p, b.d} {
		if s.URL == "" {
			return fmt.Errorf("node %s (instance %s) is not alive or advertises no API address in %s/state", s.Node, s.ID, b.base)
		}
	}
	links, err := b.api.at(b.base).Links(ctx)
	if err != nil {
		return err
	}
	for _, l := range links {
		for _, id := range []string{p.ID, d.ID} {
			if slices.Contains(l.PrefillInstances, id) || slices.Contains(l.DecodeInstances, id) {
				return fmt.Errorf("instance link %s already names %s: the benchmark steers requests with a link of its own; remove it (DELETE /v1/instance-links/%s) or pick other instances", l.LinkID, id, l.LinkID)
			}
		}
	}
	switch {
	case p.Role == "prefill":
		b.prefillAloneSkip = fmt.Sprintf("the prefill instance %s has role prefill and cannot decode", p.ID)
	case d.Role != "decode":
		b.prefillAloneSkip = fmt.Sprintf("the decode instance %s (role %s) is loaded, and without a link the router has it prefill the prefill instance's long prompts; load it with role decode, or run with --create or --local", d.ID, orNone(d.Role))
	}
	b.unloadable = o.AllowUnload
	return nil
}

// setupCreate plans the benchmark's own instances on two nodes; they are loaded in exo's order as the run
// goes.
func (b *pdBench) setupCreate(ctx context.Context) error {
	o := b.o
	b.base = strings.TrimRight(o.URL, "/")
	urls, alive, err := b.nodeURLs(ctx, b.base)
	if err != nil {
		return err
	}
	pn, dn := o.PrefillNode, o.DecodeNode
	for _, n := range alive {
		if pn == "" && n != dn {
			pn = n
		}
	}
	for _, n := range alive {
		if dn == "" && n != pn {
			dn = n
		}
	}
	switch {
	case pn == "" || dn == "":
		return fmt.Errorf("--create needs two alive nodes; %s/state lists %d", b.base, len(alive))
	case pn == dn:
		return fmt.Errorf("--prefill-node and --decode-node are the same node %s: P/D needs two", pn)
	case urls[pn] == "" || urls[dn] == "":
		return fmt.Errorf("node %s or %s is not alive or advertises no API address", pn, dn)
	}
	prefillModel := o.PrefillModel
	if prefillModel == "" {
		prefillModel = o.Model
	}
	// The benchmark's instances must be the only ones of their model: the router would send the phases'
	// requests, or their prefills, to any other.
	ins, err := b.api.at(b.base).Instances(ctx)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.Model == o.Model || in.Model == prefillModel {
			return fmt.Errorf("--create: the cluster already serves %s (instance %s on node %s), which would take the benchmark's requests or prefill them; unload it, benchmark another model, or name the instances with --prefill-instance and --decode-instance", in.Model, in.ID, in.Node)
		}
	}
	b.p, b.d = side{instance{Node: pn, Model: prefillModel}, urls[pn]}, side{instance{Node: dn, Model: o.Model}, urls[dn]}
	b.unloadable = true
	load := func(s *side, model string, role int) func(context.Context) error {
		return func(ctx context.Context) error {
			b.prog.note("loading %s on node %s", model, s.Node)
			opts := b.engineOptions(role)
			lctx, cancel := context.WithTimeout(ctx, time.Duration(o.Timeout))
			defer cancel()
			in, err := b.api.at(b.base).CreateInstance(lctx, client.NewInstance{Model: model, Node: s.Node, Options: opts})
			if err != nil {
				return fmt.Errorf("loading the benchmark's instance on node %s: %w", s.Node, err)
			}
			b.owned = append(b.owned, in.ID)
			return waitUntil(ctx, time.Duration(o.SettleTimeout), "instance "+in.ID+" ready on node "+s.Node, func() (bool, error) {
				ins, err := b.api.at(s.URL).Instances(ctx)
				for _, c := range ins {
					if c.ID == in.ID && c.Status == "ready" {
						s.instance = c
						return true, nil
					}
				}
				return false, err
			})
		}
	}
	b.startPrefill = load(&b.p, prefillModel, 0)
	b.startDecode = func(ctx context.Context) error {
		if err := load(&b.d, o.Model, 1)(ctx); err != nil {
			return err
		}
		if b.p.KVEndpoint == "" {
			return fmt.Errorf("the benchmark's prefill instance %s serves no KV", b.p.ID)
		}
		return b.waitVisible(ctx, []string{b.p.ID, b.d.ID})
	}
	return nil
}

func (b *pdBench) dryRun(w io.Writer) {
	if b.o.Create {
		fmt.Fprintf(w, "PREFILL: would load %s on node %s (via %s)\n", b.o.Model, b.p.Node, b.p.URL)
		fmt.Fprintf(w, "DECODE:  would load %s on node %s (via %s)\n", b.o.Model, b.d.Node, b.d.URL)
	} else {
		fmt.Fprintf(w, "PREFILL: instance %s on node %s (%s), model %s, kv %s, via %s\n", b.p.ID, b.p.Node, sideBackend(b.sideSummary(b.p, 0)), b.p.Model, b.p.KVEndpoint, b.p.URL)
		fmt.Fprintf(w, "DECODE:  instance %s on node %s (%s), model %s, via %s\n", b.d.ID, b.d.Node, sideBackend(b.sideSummary(b.d, 1)), b.d.Model, b.d.URL)
	}
	if b.prefillAloneSkip != "" {
		fmt.Fprintln(w, "prefill_alone would not run: "+b.prefillAloneSkip)
	}
	if !b.unloadable && (b.o.CompareBaseline || b.o.Isolation) {
		fmt.Fprintln(w, "decode_alone and the isolation case without P/D would not run: the prefill instance is not the benchmark's to unload (--allow-unload)")
	}
}

// pickPair chooses the prefill and the decode instance of a running cluster: the ones named, else ready
// instances of the model on two nodes, preferring roles prefill and decode (then both), the nodes asked for,
// and the lowest ids.
func pickPair(all []instance, o PDOptions) (instance, instance, error) {
	var ready []instance
	for _, in := range all {
		if in.Status == "ready" {
			ready = append(ready, in)
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].ID < ready[j].ID })
	byID := func(id, flag string) (instance, error) {
		for _, in := range all {
			if in.ID == id {
				if in.Status != "ready" {
					return in, fmt.Errorf("%s %s is %s, not ready", flag, id, in.Status)
				}
				return in, nil
			}
		}
		return instance{}, fmt.Errorf("%s %s: no such instance in the cluster", flag, id)
	}
	model := o.Model
	if model == "" && o.DecodeInstance == "" && o.PrefillInstance == "" {
		// Any model with ready instances on two nodes, the first by name.
		nodes := map[string]map[string]bool{}
		for _, in := range ready {
			if nodes[in.Model] == nil {
				nodes[in.Model] = map[string]bool{}
			}
			nodes[in.Model][in.Node] = true
		}
		var models []string
		for m, ns := range nodes {
			if len(ns) >= 2 {
				models = append(models, m)
			}
		}
		sort.Strings(models)
		if len(models) == 0 {
			return instance{}, instance{}, errors.New("no model has ready instances on two nodes: load one on each (POST /v1/instances), name them with --prefill-instance and --decode-instance, or use --create")
		}
		model = models[0]
	}
	// rank orders candidates for a side: its own role first, then both; the other role cannot serve it.
	rank := func(in instance, prefer string) int {
		switch in.Role {
		case prefer:
			return 0
		case "both", "":
			return 1
		}
		return 2
	}
	pick := func(flag, want, node, prefer, avoidNode string, needKV bool) (instance, error) {
		for r := range 2 {
			for _, in := range ready {
				if rank(in, prefer) == r && (want == "" || in.Model == want) && (node == "" || in.Node == node) &&
					in.Node != avoidNode && (!needKV || in.KVEndpoint != "") {
					return in, nil
				}
			}
		}
		where := ""
		if node != "" {
			where += " on node " + node
		}
		if avoidNode != "" {
			where += " off node " + avoidNode
		}
		kv := ""
		if needKV {
			kv = " serving KV"
		}
		return instance{}, fmt.Errorf("no ready instance of model %q%s that can %s%s: name one with %s", want, where, prefer, kv, flag)
	}
	var p, d instance
	var err error
	if o.DecodeInstance != "" {
		if d, err = byID(o.DecodeInstance, "--decode-instance"); err != nil {
			return p, d, err
		}
		if model == "" {
			model = d.Model
		}
	}
	prefillModel := o.PrefillModel
	if o.PrefillInstance != "" {
		if p, err = byID(o.PrefillInstance, "--prefill-instance"); err != nil {
			return p, d, err
		}
		if model == "" {
			model = p.Model
		}
	} else {
		if prefillModel == "" {
			prefillModel = model
		}
		if p, err = pick("--prefill-instance", prefillModel, o.PrefillNode, "prefill", d.Node, true); err != nil {
			return p, d, err
		}
	}
	if o.DecodeInstance == "" {
		if d, err = pick("--decode-instance", model, o.DecodeNode, "decode", p.Node, false); err != nil {
			return p, d, err
		}
	}
	switch {
	case p.KVEndpoint == "":
		return p, d, fmt.Errorf("the prefill instance %s serves no KV (no kv_endpoint): it cannot prefill for another node", p.ID)
	case p.Role == "decode":
		return p, d, fmt.Errorf("the prefill instance %s has role decode", p.ID)
	case d.Role == "prefill":
		return p, d, fmt.Errorf("the decode instance %s has role prefill", d.ID)
	case p.Node == d.Node:
		return p, d, fmt.Errorf("the prefill instance %s and the decode instance %s are on the same node %s: P/D needs two", p.ID, d.ID, p.Node)
	}
	return p, d, nil
}

// steps counts the progress steps of the phases that will run.
func (b *pdBench) steps() int {
	n := 0
	for _, ph := range pdPhases {
		if ph.Skip != nil {
			if why, _ := ph.Skip(b); why != "" {
				continue
			}
		}
		if ph.Target != nil {
			n += len(b.o.pairs())*b.o.Repeat + b.o.Warmup
		} else {
			n += ph.Steps
		}
	}
	return n
}
