// Package routertest is the conformance suite for router plugins. Any implementation of router.Router runs the
// same checks, in process through the real gRPC adapter (Run) or as a real subprocess (RunPlugin). The checks
// are the rules every router must keep whatever its policy: only ready decode-capable instances of the
// requested model on live nodes, never an instance the request excludes, prefill endpoints that can actually
// serve the decode instance (approximate ones only where an instance link pairs them, and marked so),
// ErrNoCandidate when nothing fits, no mutation of the snapshot, and safety under concurrent calls.
package routertest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/sdk/internal/selfexec"
	"github.com/duet-ai/duet/sdk/router"
)

// Run serves impl in process through the real gRPC adapter and runs the suite against the client.
func Run(t *testing.T, impl router.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rc, err := router.ServeInProcess(ctx, impl)
	if err != nil {
		t.Fatalf("serve in process: %v", err)
	}
	cfg := router.ClientConfig()
	cfg.Reattach = rc
	cfg.Logger = hclog.NewNullLogger()
	client, pc, err := router.Connect(cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pc.Kill)
	RunRouter(t, client)
}

// RunPlugin starts cmd as a router plugin subprocess (AutoMTLS on) and runs the suite.
func RunPlugin(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cfg := router.ClientConfig()
	cfg.Cmd = cmd
	cfg.AutoMTLS = true
	cfg.Logger = hclog.NewNullLogger()
	client, pc, err := router.Connect(cfg)
	if err != nil {
		t.Fatalf("start plugin: %v", err)
	}
	t.Cleanup(pc.Kill)
	RunRouter(t, client)
}

const pluginEnv = "DUET_ROUTERTEST_PLUGIN"

// ServePluginIfRequested serves the router newRouter returns and exits, when this process was started by
// PluginCommand. Call it first thing in TestMain.
func ServePluginIfRequested(newRouter func() router.Router) {
	selfexec.ServeIfMarked(pluginEnv, func() { router.Serve(newRouter()) })
}

// PluginCommand re-executes the running test binary as a router plugin (see ServePluginIfRequested).
func PluginCommand(t testing.TB) *exec.Cmd {
	t.Helper()
	return selfexec.Command(t, pluginEnv)
}

// Cluster builds a snapshot for tests: nodes n1..nN all alive, with a path over ethernet between each pair.
func Cluster(nodes int, instances ...router.Instance) *router.Snapshot {
	s := &router.Snapshot{Version: 1, Self: "n1", Instances: instances}
	for i := 1; i <= nodes; i++ {
		id := fmt.Sprintf("n%d", i)
		s.Nodes = append(s.Nodes, router.Node{ID: id, Name: id, Status: router.NodeAlive, APIAddress: fmt.Sprintf("127.0.0.%d:8000", i)})
		for j := 1; j <= nodes; j++ {
			if i != j {
				s.Paths = append(s.Paths, router.Path{
					From: id, To: fmt.Sprintf("n%d", j), Address: fmt.Sprintf("127.0.0.%d", j), Kind: "ethernet",
					SpeedMbps: 10000, RTT: 200 * time.Microsecond, Quality: 0.8,
				})
			}
		}
	}
	return s
}

// Ready is a ready instance of model on node, with a KV endpoint. Instances of the same model share their
// fingerprint and their KV compatibility family.
func Ready(id, model, node, role string) router.Instance {
	return router.Instance{
		ID: id, Model: model, Node: node, Engine: "test", Backend: "cpu", Role: role, Status: router.InstanceReady,
		KVEndpoint: node + ":7000", Fingerprint: "fp-" + model, KVCompat: "kv-" + model, ContextLength: 8192,
	}
}

// Quantized returns the instance at another quantization of the same model: another fingerprint, the same
// KV compatibility family (KVCompat).
func Quantized(in router.Instance, quant string) router.Instance {
	in.Fingerprint += "-" + quant
	return in
}

// RunRouter runs the suite against any Router.
func RunRouter(t *testing.T, r router.Router) {
	t.Helper()
	ctx := context.Background()
	req := router.Request{RequestID: "r1", Model: "m", PromptTokens: 4000, SourceNode: "n1", MaxTokens: 64}

	t.Run("PicksTheOnlyCandidate", func(t *testing.T) {
		snap := Cluster(2, Ready("a", "m", "n2", router.RoleBoth), Ready("b", "other", "n1", router.RoleBoth))
		d := route(t, r, req, snap)
		if d.DecodeInstance != "a" || d.DecodeNode != "n2" {
			t.Errorf("decision %+v, want instance a on n2", d)
		}
	})

	t.Run("NoCandidate", func(t *testing.T) {
		snap := Cluster(2, Ready("b", "other", "n1", router.RoleBoth))
		_, err := r.Route(ctx, req, snap)
		if !errors.Is(err, router.ErrNoCandidate) {
			t.Errorf("got %v, want ErrNoCandidate", err)
		}
		_, err = r.Route(ctx, req, &router.Snapshot{Version: 9})
		if !errors.Is(err, router.ErrNoCandidate) {
			t.Errorf("empty snapshot: got %v, want ErrNoCandidate", err)
		}
	})

	t.Run("SkipsIneligible", func(t *testing.T) {
		loading := Ready("loading", "m", "n1", router.RoleBoth)
		loading.Status = router.InstanceLoading
		down := Ready("down", "m", "n1", router.RoleBoth)
		down.Status = router.InstanceUnavailable
		onFailed := Ready("on-failed", "m", "n3", router.RoleBoth)
		prefillOnly := Ready("prefill-only", "m", "n1", router.RolePrefill)
		good := Ready("good", "m", "n2", router.RoleBoth)
		snap := Cluster(3, loading, down, onFailed, prefillOnly, good)
		snap.Nodes[2].Status = router.NodeFailed
		for i := range 20 {
			req := req
			req.RequestID = fmt.Sprintf("r%d", i)
			if d := route(t, r, req, snap); d.DecodeInstance != "good" {
				t.Fatalf("picked %q, want good (the only eligible instance): %s", d.DecodeInstance, d.Reason)
			}
		}
	})

	t.Run("PrefillEndpointsAreValid", func(t *testing.T) {
		snap := Cluster(3,
			Ready("d", "m", "n1", router.RoleDecode),
			Ready("p", "m", "n2", router.RolePrefill),
			Ready("p-other-model", "x", "n3", router.RolePrefill),
		)
		snap.InstanceLinks = []router.InstanceLink{{ID: "l1", PrefillInstances: []string{"p"}, DecodeInstances: []string{"d"}}}
		d := route(t, r, req, snap)
		if d.DecodeInstance != "d" {
			t.Fatalf("decode instance %q, want d", d.DecodeInstance)
		}
		// route has checked the endpoints.
	})

	t.Run("ApproximatePrefillOnlyWhenLinked", func(t *testing.T) {
		// q is the same model at another quantization: its KV can feed d only approximately, and only where an
		// instance link pairs them. route checks that any endpoint keeps to that and says it is approximate.
		unlinked := Cluster(2, Ready("d", "m", "n1", router.RoleDecode), Quantized(Ready("q", "m", "n2", router.RolePrefill), "q4"))
		if d := route(t, r, req, unlinked); d.DecodeInstance != "d" {
			t.Fatalf("decode instance %q, want d", d.DecodeInstance)
		}
		linked := Cluster(2, Ready("d", "m", "n1", router.RoleDecode), Quantized(Ready("q", "m", "n2", router.RolePrefill), "q4"))
		linked.InstanceLinks = []router.InstanceLink{{ID: "l1", PrefillInstances: []string{"q"}, DecodeInstances: []string{"d"}}}
		if d := route(t, r, req, linked); d.DecodeInstance != "d" {
			t.Fatalf("decode instance %q, want d", d.DecodeInstance)
		}
	})

	t.Run("HonoursExclude", func(t *testing.T) {
		snap := Cluster(3, Ready("a", "m", "n1", router.RoleBoth), Ready("b", "m", "n2", router.RoleBoth), Ready("c", "m", "n3", router.RoleBoth))
		for i := range 20 {
			req := req
			req.RequestID = fmt.Sprintf("x%d", i)
			req.Exclude = []string{"a", "not-in-the-snapshot"}
			route(t, r, req, snap) // route checks that a is not chosen
			req.Exclude = []string{"b", "a"}
			if d := route(t, r, req, snap); d.DecodeInstance != "c" {
				t.Fatalf("picked %q with a and b excluded, want c", d.DecodeInstance)
			}
		}
		all := req
		all.Exclude = []string{"c", "b", "a"}
		if d, err := r.Route(ctx, all, snap); !errors.Is(err, router.ErrNoCandidate) {
			t.Errorf("every candidate excluded: got %+v, %v; want ErrNoCandidate", d, err)
		}
	})

	t.Run("DoesNotMutateSnapshot", func(t *testing.T) {
		snap := Cluster(3, Ready("a", "m", "n1", router.RoleBoth), Ready("b", "m", "n2", router.RoleBoth), Ready("p", "m", "n3", router.RolePrefill))
		snap.InstanceLinks = []router.InstanceLink{{ID: "l1", PrefillInstances: []string{"p"}, DecodeInstances: []string{"a", "b"}}}
		before := Cluster(3, Ready("a", "m", "n1", router.RoleBoth), Ready("b", "m", "n2", router.RoleBoth), Ready("p", "m", "n3", router.RolePrefill))
		before.InstanceLinks = []router.InstanceLink{{ID: "l1", PrefillInstances: []string{"p"}, DecodeInstances: []string{"a", "b"}}}
		for range 5 {
			route(t, r, req, snap)
		}
		if !reflect.DeepEqual(snap, before) {
			t.Errorf("Route modified the snapshot")
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Snapshots change while requests are routed.
		snaps := make([]*router.Snapshot, 8)
		for i := range snaps {
			snaps[i] = Cluster(3, Ready("a", "m", "n1", router.RoleBoth), Ready("b", "m", "n2", router.RoleBoth))
			snaps[i].Version = uint64(i + 1)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := req
				req.RequestID = fmt.Sprintf("c%d", i)
				if _, err := r.Route(ctx, req, snaps[i/8]); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent Route: %v", err)
		}
	})

	t.Run("LargeCluster", func(t *testing.T) {
		var ins []router.Instance
		for i := range 2000 {
			ins = append(ins, Ready(fmt.Sprintf("i%d", i), fmt.Sprintf("model-%d", i%50), fmt.Sprintf("n%d", i%64+1), router.RoleBoth))
		}
		snap := Cluster(64, ins...)
		req := req
		req.Model = "model-7"
		d := route(t, r, req, snap)
		if in, _ := snap.Instance(d.DecodeInstance); in.Model != "model-7" {
			t.Errorf("picked %q of model %q", d.DecodeInstance, in.Model)
		}
	})
}

func route(t *testing.T, r router.Router, req router.Request, snap *router.Snapshot) router.Decision {
	t.Helper()
	d, err := r.Route(context.Background(), req, snap)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	if d.Reason == "" {
		t.Errorf("decision has no reason")
	}
	in, ok := snap.Instance(d.DecodeInstance)
	if !ok {
		t.Fatalf("decode instance %q is not in the snapshot", d.DecodeInstance)
	}
	if d.DecodeNode != in.Node {
		t.Errorf("decode node %q, but instance %q is on %q", d.DecodeNode, in.ID, in.Node)
	}
	if in.Model != req.Model {
		t.Errorf("picked an instance of model %q for %q", in.Model, req.Model)
	}
	if slices.Contains(req.Exclude, d.DecodeInstance) {
		t.Errorf("picked %q, which the request excludes (%v)", d.DecodeInstance, req.Exclude)
	}
	checkPrefill(t, snap, in, d.PrefillEndpoints)
	return d
}

// checkPrefill checks that each prefill endpoint can feed the decode instance: an exact one has its
// fingerprint, an approximate one its KV compatibility family and an instance link pairing them.
func checkPrefill(t *testing.T, snap *router.Snapshot, dec router.Instance, eps []router.PrefillEndpoint) {
	t.Helper()
	for _, pe := range eps {
		p, ok := snap.Instance(pe.InstanceID)
		exact := p.Fingerprint != "" && p.Fingerprint == dec.Fingerprint
		approximate := !exact && p.KVCompat != "" && p.KVCompat == dec.KVCompat && linked(snap, dec.ID, p.ID)
		switch {
		case !ok:
			t.Errorf("prefill endpoint %q is not in the snapshot", pe.InstanceID)
		case pe.InstanceID == dec.ID:
			t.Errorf("the decode instance is its own prefill endpoint")
		case p.Model != dec.Model:
			t.Errorf("prefill endpoint %q serves another model", pe.InstanceID)
		case !exact && !approximate:
			t.Errorf("prefill endpoint %q cannot feed %q: other fingerprint, and no instance link pairs them with one KVCompat", pe.InstanceID, dec.ID)
		case pe.Approximate == exact:
			t.Errorf("prefill endpoint %q has Approximate %v, want %v (fingerprints %q and %q)", pe.InstanceID, pe.Approximate, !exact, p.Fingerprint, dec.Fingerprint)
		case pe.Address == "":
			t.Errorf("prefill endpoint %q has no address", pe.InstanceID)
		}
	}
}

// linked reports whether an instance link names prefill as a prefill instance of decode.
func linked(snap *router.Snapshot, decode, prefill string) bool {
	for _, l := range snap.InstanceLinks {
		if slices.Contains(l.DecodeInstances, decode) && slices.Contains(l.PrefillInstances, prefill) {
			return true
		}
	}
	return false
}
