package mlxengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/sdk/clustersecret"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// pdOptions configure disaggregated prefill for an instance: the KV wire server it runs as a prefill engine,
// and how it fetches KV as a decode engine.
type pdOptions struct {
	listen    string   // KV wire address; empty: no prefill server
	advertise string   // address other engines dial, when it differs from the listener's
	secrets   [][]byte // KV wire keys, current first: the server requires one, the client proves the first
	threshold int      // least uncached prompt tokens worth a remote prefill
	required  bool     // fail instead of prefilling locally when every endpoint fails
	timeout   time.Duration
	frame     time.Duration
	checksum  bool
	pickup    time.Duration
}

func defaultPD() pdOptions {
	return pdOptions{threshold: 1000, timeout: 2 * time.Minute, frame: 30 * time.Second, pickup: 5 * time.Second}
}

// parsePD reads the P/D options out of in; it returns the options it did not know.
func parsePD(in map[string]string) (pdOptions, map[string]string, error) {
	o := defaultPD()
	rest := map[string]string{}
	var err error
	for k, v := range in {
		switch k {
		case "kv_listen":
			o.listen = v
		case "kv_advertise":
			o.advertise = v
		case "cluster_secret_file":
			var b []byte
			if b, err = clustersecret.ReadFile(v); err == nil {
				var k []byte
				k, err = kvKey(b)
				o.secrets = [][]byte{k}
			}
		case "remote_prefill_threshold":
			_, err = fmt.Sscan(v, &o.threshold)
		case "remote_prefill_required":
			o.required = v == "true" || v == "1"
		case "remote_prefill_timeout":
			o.timeout, err = time.ParseDuration(v)
		case "kv_frame_timeout":
			o.frame, err = time.ParseDuration(v)
		case "kv_pickup_timeout":
			o.pickup, err = time.ParseDuration(v)
		case "kv_checksum":
			o.checksum = v == "true" || v == "1"
		default:
			rest[k] = v
		}
		if err != nil {
			return o, nil, engine.InvalidParam("options", "option %s=%q: %v", k, v, err)
		}
	}
	if o.secrets == nil {
		// The gateway hands its plugins the KV keys alone; run on its own, the engine derives the key as a
		// gateway would from the cluster secret.
		keys, err := clustersecret.KVKeysFromEnv()
		if err != nil {
			return o, nil, engine.InvalidParam("options", "%v", err)
		}
		o.secrets = keys
		if s := os.Getenv("DUET_CLUSTER_SECRET"); keys == nil && s != "" {
			k, err := kvKey([]byte(s))
			if err != nil {
				return o, nil, engine.InvalidParam("options", "DUET_CLUSTER_SECRET: %v", err)
			}
			o.secrets = [][]byte{k}
		}
	}
	return o, rest, nil
}

// kvKey is the KV wire key of a cluster secret.
func kvKey(secret []byte) ([]byte, error) {
	k, err := clustersecret.Derive(secret)
	return k.KV, err
}

// startKVServer runs the instance's KV wire server: jobs whose model matches go to the instance's loop.
func (in *instance) startKVServer(o pdOptions) error {
	srv, err := kvwire.NewServer(kvwire.ServerConfig{
		Dispatch:      in.dispatch,
		PickupTimeout: o.pickup,
		Secrets:       o.secrets,
		RequireAuth:   len(o.secrets) > 0,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "KV wire listener on %s: %v", o.listen, err)
	}
	in.kv = srv
	go func() { _ = srv.Serve(ln) }()
	in.desc.PrefillEndpoint = ln.Addr().String()
	if o.advertise != "" {
		in.desc.PrefillEndpoint = o.advertise
	}
	in.desc.Capabilities.PrefillServer = true
	return nil
}

func first(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}

// dispatch runs on a KV wire connection goroutine: it checks the job against this instance's model and hands
// it to the loop, without blocking.
func (in *instance) dispatch(job *kvwire.Job) {
	req := job.Request
	approximate := req.KVCompat != "" && req.KVCompat == in.desc.KVCompat
	switch {
	case req.Fingerprint != "" && req.Fingerprint != in.desc.Fingerprint && !approximate:
		_ = job.Reject(kvwire.CodeBadRequest, fmt.Sprintf("model fingerprint %s does not match this instance's %s (%s)", req.Fingerprint, in.desc.Fingerprint, in.desc.ModelID))
	case req.Fingerprint == "" && !sameModel(req.ModelID, in.desc.ModelID):
		_ = job.Reject(kvwire.CodeBadRequest, fmt.Sprintf("this instance serves %q, not %q", in.desc.ModelID, req.ModelID))
	case !in.runner.SubmitExport(job, in.desc.Fingerprint, kvCompatIf(req.KVCompat != "", in.desc.KVCompat)):
		_ = job.Reject(kvwire.CodeBusy, "the prefill queue is full")
	}
}

func kvCompatIf(asked bool, kvc string) string {
	if asked {
		return kvc
	}
	return ""
}

// sameModel compares model ids loosely: "org/name" matches "name", as peers may name a model by its hub id or
// its directory.
func sameModel(a, b string) bool {
	if a == b || a == "" {
		return true
	}
	return strings.HasSuffix(a, "/"+b) || strings.HasSuffix(b, "/"+a)
}

func (in *instance) stopKVServer() {
	if in.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.kv.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		_ = in.kv.Close()
	}
	_ = in.kv.Close()
}

// remote builds the remote-prefill part of a runner request.
func (in *instance) remote(eps []engine.PrefillEndpoint) *runner.Remote {
	if len(eps) == 0 {
		return nil
	}
	o := in.pd
	return &runner.Remote{
		Endpoints: eps, Threshold: o.threshold, Required: o.required,
		ModelID: in.desc.ModelID, Fingerprint: in.desc.Fingerprint, KVCompat: in.desc.KVCompat,
		Secret: first(o.secrets), Checksum: o.checksum, Timeout: o.timeout, FrameTimeout: o.frame,
	}
}
