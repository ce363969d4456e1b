package engine

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/duet-ai/duet/sdk/internal/pluginrpc"
	pb "github.com/duet-ai/duet/sdk/internal/proto/enginev1"
)

// PluginName is the name an engine is dispensed under.
const PluginName = "engine"

// Plugin is the go-plugin glue for engines. The gateway uses it (through Connect) to talk to an engine
// subprocess; Serve uses it to serve one. Impl is only set on the serving side.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Engine
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the engine's gRPC service.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterEngineServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns an Engine that calls the plugin over conn.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &grpcClient{client: pb.NewEngineClient(conn)}, nil
}

// grpcServer adapts an Engine to the generated gRPC service.
type grpcServer struct {
	pb.UnimplementedEngineServer
	impl Engine
}

func (s *grpcServer) Load(ctx context.Context, req *pb.LoadRequest) (*pb.Description, error) {
	d, err := s.impl.Load(ctx, loadRequestFromProto(req))
	if err != nil {
		return nil, toStatus(err)
	}
	return descriptionToProto(d), nil
}

func (s *grpcServer) Unload(ctx context.Context, req *pb.UnloadRequest) (*pb.Empty, error) {
	return &pb.Empty{}, toStatus(s.impl.Unload(ctx, req.GetInstanceId()))
}

func (s *grpcServer) Instances(ctx context.Context, _ *pb.Empty) (*pb.InstancesResponse, error) {
	ds, err := s.impl.Instances(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.InstancesResponse{}
	for _, d := range ds {
		out.Instances = append(out.Instances, descriptionToProto(d))
	}
	return out, nil
}

func (s *grpcServer) Tokenize(ctx context.Context, req *pb.TokenizeRequest) (*pb.TokenizeResponse, error) {
	r, err := s.impl.Tokenize(ctx, tokenizeRequestFromProto(req))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.TokenizeResponse{Tokens: r.Tokens, Text: r.Text}, nil
}

func (s *grpcServer) Stats(ctx context.Context, _ *pb.Empty) (*pb.StatsResponse, error) {
	st, err := s.impl.Stats(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return statsToProto(st), nil
}

func (s *grpcServer) Health(ctx context.Context, _ *pb.Empty) (*pb.Empty, error) {
	return &pb.Empty{}, toStatus(s.impl.Health(ctx))
}

// maxBatch bounds how many events one gRPC message carries, and eventQueue how many wait to be sent before
// the engine's emit blocks (backpressure from a slow consumer).
const (
	maxBatch   = 256
	eventQueue = 1024
)

// Generate runs the engine's Generate and streams its events. The engine's emit only queues an event; one
// sender goroutine drains the queue into EventBatch messages, so when the engine is faster than the stream
// the events that queued up travel together instead of one message per token.
func (s *grpcServer) Generate(req *pb.GenerateRequest, stream grpc.ServerStreamingServer[pb.EventBatch]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	queue := make(chan *pb.Event, eventQueue)
	var sendErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch := &pb.EventBatch{Events: make([]*pb.Event, 0, maxBatch)}
		for ev := range queue {
			batch.Events = append(batch.Events[:0], ev)
		drain:
			for len(batch.Events) < maxBatch {
				select {
				case more, ok := <-queue:
					if !ok {
						break drain
					}
					batch.Events = append(batch.Events, more)
				default:
					break drain
				}
			}
			if sendErr == nil {
				if err := stream.Send(batch); err != nil {
					sendErr = err
					cancel() // the consumer is gone: stop the engine
				}
			}
		}
	}()

	emit := func(ev Event) error {
		select {
		case queue <- eventToProto(ev):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := s.impl.Generate(ctx, generateRequestFromProto(req), emit)
	close(queue)
	wg.Wait()
	if err != nil {
		return toStatus(err)
	}
	return sendErr
}

// grpcClient is an Engine that calls a plugin over gRPC.
type grpcClient struct {
	client pb.EngineClient
}

var _ Engine = (*grpcClient)(nil)

func (c *grpcClient) Load(ctx context.Context, req LoadRequest) (Description, error) {
	d, err := c.client.Load(ctx, loadRequestToProto(req))
	if err != nil {
		return Description{}, fromStatus(ctx, err)
	}
	return descriptionFromProto(d), nil
}

func (c *grpcClient) Unload(ctx context.Context, instanceID string) error {
	_, err := c.client.Unload(ctx, &pb.UnloadRequest{InstanceId: instanceID})
	return fromStatus(ctx, err)
}

func (c *grpcClient) Instances(ctx context.Context) ([]Description, error) {
	r, err := c.client.Instances(ctx, &pb.Empty{})
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	out := make([]Description, 0, len(r.GetInstances()))
	for _, d := range r.GetInstances() {
		out = append(out, descriptionFromProto(d))
	}
	return out, nil
}

func (c *grpcClient) Tokenize(ctx context.Context, req TokenizeRequest) (TokenizeResponse, error) {
	r, err := c.client.Tokenize(ctx, tokenizeRequestToProto(req))
	if err != nil {
		return TokenizeResponse{}, fromStatus(ctx, err)
	}
	return TokenizeResponse{Tokens: r.GetTokens(), Text: r.GetText()}, nil
}

func (c *grpcClient) Stats(ctx context.Context) (Stats, error) {
	r, err := c.client.Stats(ctx, &pb.Empty{})
	if err != nil {
		return Stats{}, fromStatus(ctx, err)
	}
	return statsFromProto(r), nil
}

func (c *grpcClient) Health(ctx context.Context) error {
	_, err := c.client.Health(ctx, &pb.Empty{})
	return fromStatus(ctx, err)
}

// Generate streams the plugin's events into emit. A stream that ends without a Final event means the plugin
// died or the connection broke: that is a CodeUnavailable error, never a silent end.
func (c *grpcClient) Generate(ctx context.Context, req GenerateRequest, emit func(Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.client.Generate(ctx, generateRequestToProto(req))
	if err != nil {
		return fromStatus(ctx, err)
	}
	sawFinal := false
	for {
		batch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if !sawFinal {
				return &Error{Code: CodeUnavailable, Message: "engine plugin ended the stream without a final event"}
			}
			return nil
		}
		if err != nil {
			if sawFinal {
				return nil
			}
			return fromStatus(ctx, err)
		}
		for _, pev := range batch.GetEvents() {
			ev := eventFromProto(pev)
			if ev.Final != nil {
				sawFinal = true
			}
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
}

var codeToGRPC = map[Code]codes.Code{
	CodeInvalidArgument:   codes.InvalidArgument,
	CodeContextLength:     codes.OutOfRange,
	CodeNotFound:          codes.NotFound,
	CodeResourceExhausted: codes.ResourceExhausted,
	CodeUnavailable:       codes.Unavailable,
	CodeCancelled:         codes.Canceled,
	CodeInternal:          codes.Internal,
}

func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeOf(err), Message: err.Error()}
	}
	gc, ok := codeToGRPC[e.Code]
	if !ok {
		gc = codes.Unknown
	}
	return pluginrpc.StatusError(gc, string(e.Code), e.Param, e.Message)
}

// fromStatus turns a gRPC error back into an *Error. Transport failures (the plugin died, the connection
// broke) become CodeUnavailable; the caller's own cancellation stays a context error.
func fromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st, ok := pluginrpc.ParseStatus(err)
	if !ok {
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
	if st.Reason != "" {
		return &Error{Code: Code(st.Reason), Param: st.Param, Message: st.Message}
	}
	switch st.Code {
	case codes.Unavailable, codes.Canceled:
		return &Error{Code: CodeUnavailable, Message: "the engine plugin is unreachable", Detail: st.Message}
	case codes.ResourceExhausted:
		return &Error{Code: CodeResourceExhausted, Message: st.Message}
	default:
		return &Error{Code: CodeInternal, Message: st.Message}
	}
}
