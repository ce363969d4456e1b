package router

import (
	"time"

	pb "github.com/duet-ai/duet/sdk/internal/proto/routerv1"
)

// This file converts between the plain Go values of this package and their protobuf twins.

func snapshotToProto(s *Snapshot) *pb.Snapshot {
	out := &pb.Snapshot{Version: s.Version, Self: s.Self}
	for _, n := range s.Nodes {
		out.Nodes = append(out.Nodes, &pb.Node{
			Id: n.ID, Name: n.Name, Status: n.Status, ApiAddress: n.APIAddress, KvAddress: n.KVAddress,
			Version: n.Version, Hardware: n.Hardware,
		})
	}
	for _, p := range s.Paths {
		out.Paths = append(out.Paths, &pb.Path{
			From: p.From, To: p.To, Address: p.Address, Kind: p.Kind, SpeedMbps: p.SpeedMbps,
			RttNs: int64(p.RTT), Quality: p.Quality,
		})
	}
	for _, in := range s.Instances {
		var updated int64
		if !in.Load.UpdatedAt.IsZero() {
			updated = in.Load.UpdatedAt.UnixMilli()
		}
		out.Instances = append(out.Instances, &pb.Instance{
			Id: in.ID, Model: in.Model, Node: in.Node, Engine: in.Engine, Role: in.Role, Status: in.Status,
			KvEndpoint: in.KVEndpoint, Fingerprint: in.Fingerprint, ContextLength: int64(in.ContextLength),
			Backend: in.Backend, KvCompat: in.KVCompat,
			Load: &pb.Load{
				InFlight: int64(in.Load.InFlight), Queued: int64(in.Load.Queued),
				KvUtilization: in.Load.KVUtilization, UpdatedUnixMs: updated,
			},
			Speed: speedToProto(&in.Speed),
		})
	}
	for _, l := range s.InstanceLinks {
		out.InstanceLinks = append(out.InstanceLinks, &pb.InstanceLink{
			Id: l.ID, PrefillInstances: l.PrefillInstances, DecodeInstances: l.DecodeInstances,
		})
	}
	return out
}

func snapshotFromProto(s *pb.Snapshot) *Snapshot {
	out := &Snapshot{Version: s.GetVersion(), Self: s.GetSelf()}
	for _, n := range s.GetNodes() {
		out.Nodes = append(out.Nodes, Node{
			ID: n.GetId(), Name: n.GetName(), Status: n.GetStatus(), APIAddress: n.GetApiAddress(),
			KVAddress: n.GetKvAddress(), Version: n.GetVersion(), Hardware: n.GetHardware(),
		})
	}
	for _, p := range s.GetPaths() {
		out.Paths = append(out.Paths, Path{
			From: p.GetFrom(), To: p.GetTo(), Address: p.GetAddress(), Kind: p.GetKind(),
			SpeedMbps: p.GetSpeedMbps(), RTT: time.Duration(p.GetRttNs()), Quality: p.GetQuality(),
		})
	}
	for _, in := range s.GetInstances() {
		ld := in.GetLoad()
		var updated time.Time
		if ms := ld.GetUpdatedUnixMs(); ms != 0 {
			updated = time.UnixMilli(ms)
		}
		out.Instances = append(out.Instances, Instance{
			ID: in.GetId(), Model: in.GetModel(), Node: in.GetNode(), Engine: in.GetEngine(), Role: in.GetRole(),
			Status: in.GetStatus(), KVEndpoint: in.GetKvEndpoint(), Fingerprint: in.GetFingerprint(),
			ContextLength: int(in.GetContextLength()), Backend: in.GetBackend(), KVCompat: in.GetKvCompat(),
			Load: Load{
				InFlight: int(ld.GetInFlight()), Queued: int(ld.GetQueued()),
				KVUtilization: ld.GetKvUtilization(), UpdatedAt: updated,
			},
			Speed: speedFromProto(in.GetSpeed()),
		})
	}
	for _, l := range s.GetInstanceLinks() {
		out.InstanceLinks = append(out.InstanceLinks, InstanceLink{
			ID: l.GetId(), PrefillInstances: l.GetPrefillInstances(), DecodeInstances: l.GetDecodeInstances(),
		})
	}
	return out
}

func requestToProto(r Request, ref uint64) *pb.RouteRequest {
	return &pb.RouteRequest{
		SnapshotRef: ref, RequestId: r.RequestID, Model: r.Model, PromptTokens: int64(r.PromptTokens),
		PrefixHashes: r.PrefixHashes, SourceNode: r.SourceNode, MaxTokens: int64(r.MaxTokens), Exclude: r.Exclude,
	}
}

func requestFromProto(r *pb.RouteRequest) Request {
	return Request{
		RequestID: r.GetRequestId(), Model: r.GetModel(), PromptTokens: int(r.GetPromptTokens()),
		PrefixHashes: r.GetPrefixHashes(), SourceNode: r.GetSourceNode(), MaxTokens: int(r.GetMaxTokens()),
		Exclude: r.GetExclude(),
	}
}

func decisionToProto(d Decision) *pb.Decision {
	out := &pb.Decision{DecodeInstance: d.DecodeInstance, DecodeNode: d.DecodeNode, Reason: d.Reason, Scores: d.Scores}
	for _, e := range d.PrefillEndpoints {
		out.PrefillEndpoints = append(out.PrefillEndpoints, &pb.PrefillEndpoint{
			InstanceId: e.InstanceID, Node: e.Node, Address: e.Address, Approximate: e.Approximate,
		})
	}
	return out
}

func decisionFromProto(d *pb.Decision) Decision {
	out := Decision{DecodeInstance: d.GetDecodeInstance(), DecodeNode: d.GetDecodeNode(), Reason: d.GetReason(), Scores: d.GetScores()}
	for _, e := range d.GetPrefillEndpoints() {
		out.PrefillEndpoints = append(out.PrefillEndpoints, PrefillEndpoint{
			InstanceID: e.GetInstanceId(), Node: e.GetNode(), Address: e.GetAddress(), Approximate: e.GetApproximate(),
		})
	}
	return out
}

func speedToProto(s *Speed) *pb.Speed {
	if s.Samples == 0 && s.KVBytesPerToken == 0 && s.KVStateBytes == 0 && len(s.Ingress) == 0 {
		return nil
	}
	out := &pb.Speed{
		PrefillTps: s.PrefillTPS[:], DecodeTps: s.DecodeTPS, QueueWaitNs: int64(s.QueueWait),
		KvBytesPerToken: s.KVBytesPerToken, KvStateBytes: s.KVStateBytes, IngestBps: s.IngestBPS, Samples: s.Samples,
	}
	for _, l := range s.Ingress {
		out.Ingress = append(out.Ingress, &pb.LinkSpeed{From: l.From, BytesPerSecond: l.BytesPerSecond, RttNs: int64(l.RTT), Samples: l.Samples, PrefillTps: l.PrefillTPS[:]})
	}
	return out
}

// speedFromProto keeps what fits: a peer with more prefill bands than this build knows loses the extra ones.
func speedFromProto(s *pb.Speed) Speed {
	if s == nil {
		return Speed{}
	}
	out := Speed{
		DecodeTPS: s.GetDecodeTps(), QueueWait: time.Duration(s.GetQueueWaitNs()), KVBytesPerToken: s.GetKvBytesPerToken(),
		KVStateBytes: s.GetKvStateBytes(), IngestBPS: s.GetIngestBps(), Samples: s.GetSamples(),
	}
	copy(out.PrefillTPS[:], s.GetPrefillTps())
	for _, l := range s.GetIngress() {
		ls := LinkSpeed{From: l.GetFrom(), BytesPerSecond: l.GetBytesPerSecond(), RTT: time.Duration(l.GetRttNs()), Samples: l.GetSamples()}
		copy(ls.PrefillTPS[:], l.GetPrefillTps())
		out.Ingress = append(out.Ingress, ls)
	}
	return out
}
