package router

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/duet-ai/duet/sdk/internal/proto/routerv1"
)

// TestConvertRoundTrip converts values with every field set to protobuf and back. allSet makes sure the
// values do set every field, so that a field added to a type but not to the converters fails here.
func TestConvertRoundTrip(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{
		Version: 7, Self: "n1",
		Nodes: []Node{{ID: "n1", Name: "one", Status: NodeAlive, APIAddress: "10.0.0.1:8000", KVAddress: "10.0.0.1:7000",
			Version: "v1", Hardware: "cpu"}},
		Paths: []Path{{From: "n1", To: "n2", Address: "10.0.0.2", Kind: "ethernet", SpeedMbps: 10000,
			RTT: 250 * time.Microsecond, Quality: 0.8}},
		Instances: []Instance{{ID: "a", Model: "m", Node: "n1", Engine: "mlx-engine", Role: RoleDecode, Status: InstanceReady,
			Backend: "mlx", KVEndpoint: "10.0.0.1:7000", Fingerprint: "fp-m-q4", KVCompat: "kv-m", ContextLength: 8192,
			Load: Load{InFlight: 2, Queued: 1, KVUtilization: 0.5, UpdatedAt: time.UnixMilli(1_700_000_000_000)},
			Speed: Speed{PrefillTPS: [PrefillBands]float64{900, 800, 600, 400}, DecodeTPS: 40, QueueWait: 3 * time.Millisecond,
				KVBytesPerToken: 36864, KVStateBytes: 77266944, IngestBPS: 2e9, Samples: 12,
				Ingress: []LinkSpeed{{From: "n2", BytesPerSecond: 1.1e8, RTT: 400 * time.Microsecond, Samples: 3, PrefillTPS: [PrefillBands]float64{1500, 1400, 900, 300}}}}}},
		InstanceLinks: []InstanceLink{{ID: "l1", PrefillInstances: []string{"p"}, DecodeInstances: []string{"a"}}},
	}
	req := Request{RequestID: "r1", Model: "m", PromptTokens: 5200, PrefixHashes: []uint64{1, 2}, SourceNode: "n1",
		MaxTokens: 64, Exclude: []string{"b"}}
	dec := Decision{DecodeInstance: "a", DecodeNode: "n1", Reason: "because", Scores: map[string]float64{"load": 1},
		PrefillEndpoints: []PrefillEndpoint{{InstanceID: "p", Node: "n2", Address: "10.0.0.2:7000", Approximate: true}}}
	for name, v := range map[string]any{"snapshot": *snap, "request": req, "decision": dec} {
		allSet(t, name, reflect.ValueOf(v))
	}
	if got := snapshotFromProto(snapshotToProto(snap)); !reflect.DeepEqual(got, snap) {
		t.Errorf("snapshot round trip:\n got %+v\nwant %+v", got, snap)
	}
	if got := requestFromProto(requestToProto(req, 3)); !reflect.DeepEqual(got, req) {
		t.Errorf("request round trip:\n got %+v\nwant %+v", got, req)
	}
	if got := decisionFromProto(decisionToProto(dec)); !reflect.DeepEqual(got, dec) {
		t.Errorf("decision round trip:\n got %+v\nwant %+v", got, dec)
	}
}

// allSet fails for each zero field under v (structs, and the first element of slices).
func allSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if v.Interface().(time.Time).IsZero() {
				t.Errorf("%s is zero: set it in the test", path)
			}
			return
		}
		for i := range v.NumField() {
			allSet(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 {
			t.Errorf("%s is empty: set it in the test", path)
			return
		}
		allSet(t, path+"[0]", v.Index(0))
	default:
		if v.IsZero() {
			t.Errorf("%s is zero: set it in the test", path)
		}
	}
}

// TestFieldNumbers pins the field numbers this contract's changes chose: they are part of the wire protocol.
func TestFieldNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		msg   protoreflect.MessageDescriptor
		field protoreflect.Name
		num   protoreflect.FieldNumber
	}{
		{(&pb.Snapshot{}).ProtoReflect().Descriptor(), "paths", 4}, // was "links": same number, same wire format
		{(&pb.RouteRequest{}).ProtoReflect().Descriptor(), "exclude", 8},
		{(&pb.Instance{}).ProtoReflect().Descriptor(), "backend", 11},
		{(&pb.Instance{}).ProtoReflect().Descriptor(), "kv_compat", 12},
		{(&pb.Instance{}).ProtoReflect().Descriptor(), "speed", 13},
		{(&pb.LinkSpeed{}).ProtoReflect().Descriptor(), "prefill_tps", 6},
		{(&pb.PrefillEndpoint{}).ProtoReflect().Descriptor(), "approximate", 4},
	}
	for _, tc := range tests {
		f := tc.msg.Fields().ByName(tc.field)
		if f == nil || f.Number() != tc.num {
			t.Errorf("%s.%s: %v, want field number %d", tc.msg.Name(), tc.field, f, tc.num)
		}
	}
}
