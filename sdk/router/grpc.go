package router

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/duet-ai/duet/sdk/internal/pluginrpc"
	pb "github.com/duet-ai/duet/sdk/internal/proto/routerv1"
)

// PluginName is the name a router is dispensed under.
const PluginName = "router"

// Plugin is the go-plugin glue for routers. Impl is only set on the serving side.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Router
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the router's gRPC service.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterRouterServer(s, &grpcServer{impl: p.Impl, snapshots: map[uint64]*Snapshot{}})
	return nil
}

// GRPCClient returns a Router that calls the plugin over conn.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &grpcClient{client: pb.NewRouterClient(conn)}, nil
}

const (
	reasonNoCandidate     = "no_candidate"
	reasonUnknownSnapshot = "unknown_snapshot"
	reasonRouteFailed     = "route_failed"
	// keptSnapshots is how many snapshots the plugin side keeps: requests routed concurrently with a snapshot
	// change may still refer to the previous ones.
	keptSnapshots = 8
)

type grpcServer struct {
	pb.UnimplementedRouterServer
	impl Router

	mu        sync.RWMutex
	snapshots map[uint64]*Snapshot // by the client's reference
	order     []uint64
}

func (s *grpcServer) SetSnapshot(_ context.Context, in *pb.SetSnapshotRequest) (*pb.Empty, error) {
	snap := snapshotFromProto(in.GetSnapshot())
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.snapshots[in.GetRef()]; !ok {
		s.order = append(s.order, in.GetRef())
	}
	s.snapshots[in.GetRef()] = snap
	for len(s.order) > keptSnapshots {
		delete(s.snapshots, s.order[0])
		s.order = s.order[1:]
	}
	return &pb.Empty{}, nil
}

func (s *grpcServer) Route(ctx context.Context, req *pb.RouteRequest) (*pb.Decision, error) {
	s.mu.RLock()
	snap, ok := s.snapshots[req.GetSnapshotRef()]
	s.mu.RUnlock()
	if !ok {
		return nil, pluginrpc.StatusError(codes.FailedPrecondition, reasonUnknownSnapshot, "", "unknown snapshot reference")
	}
	d, err := s.impl.Route(ctx, requestFromProto(req), snap)
	if err != nil {
		if errors.Is(err, ErrNoCandidate) {
			return nil, pluginrpc.StatusError(codes.NotFound, reasonNoCandidate, "", err.Error())
		}
		return nil, pluginrpc.StatusError(codes.Internal, reasonRouteFailed, "", err.Error())
	}
	return decisionToProto(d), nil
}

// grpcClient is a Router that calls a plugin over gRPC. It sends each snapshot once, the first time a Route
// uses it, and refers to it by a reference number afterwards.
type grpcClient struct {
	client pb.RouterClient

	mu      sync.Mutex
	last    *Snapshot
	lastRef uint64
	nextRef uint64
}

var _ Router = (*grpcClient)(nil)

func (c *grpcClient) Route(ctx context.Context, req Request, snap *Snapshot) (Decision, error) {
	ref, err := c.ensureSnapshot(ctx, snap, false)
	if err != nil {
		return Decision{}, err
	}
	d, err := c.client.Route(ctx, requestToProto(req, ref))
	if st, ok := pluginrpc.ParseStatus(err); ok && st.Reason == reasonUnknownSnapshot {
		// The plugin restarted or dropped it: send it again, once.
		if ref, err = c.ensureSnapshot(ctx, snap, true); err != nil {
			return Decision{}, err
		}
		d, err = c.client.Route(ctx, requestToProto(req, ref))
	}
	if err != nil {
		return Decision{}, fromStatus(ctx, err)
	}
	return decisionFromProto(d), nil
}

func (c *grpcClient) ensureSnapshot(ctx context.Context, snap *Snapshot, force bool) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if snap == c.last && !force {
		return c.lastRef, nil
	}
	c.nextRef++
	ref := c.nextRef
	if _, err := c.client.SetSnapshot(ctx, &pb.SetSnapshotRequest{Ref: ref, Snapshot: snapshotToProto(snap)}); err != nil {
		return 0, fromStatus(ctx, err)
	}
	c.last, c.lastRef = snap, ref
	return ref, nil
}

func fromStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st, ok := pluginrpc.ParseStatus(err)
	switch {
	case !ok:
		return err
	case st.Reason == reasonNoCandidate:
		return fmt.Errorf("%w: %s", ErrNoCandidate, st.Message)
	default:
		return fmt.Errorf("router plugin: %s", st.Message)
	}
}
