package kvwiretest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// Response is what an exo-shaped server sends for one request: the header, then the messages in order
// (normally chunks, arrays states and a final *kvwire.Done or *kvwire.Error).
type Response struct {
	Header   kvwire.Header
	Messages []kvwire.Message
}

// ErrorResponse is exo's answer for a failure: a header with no layers and dtype float32, then the error.
func ErrorResponse(code int, message string) Response {
	return Response{
		Header:   kvwire.Header{DType: kvwire.Float32},
		Messages: []kvwire.Message{&kvwire.Error{Code: code, Message: message}},
	}
}

// PlainServer is an exo-shaped KV server on a loopback port: one request per connection, decoded ignoring
// unknown keys (so duet's extension keys go unnoticed), answered with the frames exo would write, then the
// connection is closed. It runs until the test ends.
type PlainServer struct {
	// Addr is the host:port to fetch from.
	Addr string

	respond func(kvwire.Request) Response
	l       net.Listener
	wg      sync.WaitGroup

	mu       sync.Mutex
	requests []kvwire.Request
}

// NewPlainServer starts a PlainServer that answers each request with respond(request). A request exo could
// not decode is answered 400, as exo does.
func NewPlainServer(t testing.TB, respond func(kvwire.Request) Response) *PlainServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kvwiretest: listen: %v", err)
	}
	s := &PlainServer{Addr: l.Addr().String(), respond: respond, l: l}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		l.Close()
		s.wg.Wait()
	})
	return s
}

// Requests returns the requests received so far, as decoded.
func (s *PlainServer) Requests() []kvwire.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]kvwire.Request(nil), s.requests...)
}

func (s *PlainServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.handle(c)
		}()
	}
}

func (s *PlainServer) handle(c net.Conn) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	body, err := kvwire.NewFrameReader(bufio.NewReader(c), 64<<20).Next()
	if err != nil {
		return // exo returns silently when no request arrives
	}
	req, err := kvwire.DecodeRequest(body)
	var resp Response
	if err != nil {
		resp = ErrorResponse(kvwire.CodeBadRequest, "Bad request: "+err.Error())
	} else {
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		resp = s.respond(req)
	}
	w := bufio.NewWriterSize(c, 256<<10)
	if err := WriteResponse(w, resp); err != nil {
		return
	}
	w.Flush()
}

// WriteResponse writes resp's frames as exo encodes them.
func WriteResponse(w io.Writer, resp Response) error {
	b, err := EncodeHeader(resp.Header)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	for _, m := range resp.Messages {
		b, err := EncodeMessage(m)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// PlainFetch is an exo-shaped client: it sends req without extensions and reads the header (decoded as exo
// does, ignoring unknown keys, even a `type`) and the messages until done or error, verifying nothing beyond
// what exo checks. The returned messages own their memory. An error message is returned in the Response and as
// a *kvwire.RemoteError.
func PlainFetch(ctx context.Context, addr string, req kvwire.Request) (Response, error) {
	var resp Response
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return resp, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(60 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	b, err := EncodeRequest(req)
	if err != nil {
		return resp, err
	}
	if _, err := c.Write(b); err != nil {
		return resp, err
	}
	fr := kvwire.NewFrameReader(bufio.NewReaderSize(c, 256<<10), 0)
	body, err := fr.Next()
	if err != nil {
		return resp, fmt.Errorf("kvwiretest: no header received: %w", err)
	}
	if resp.Header, err = kvwire.DecodeHeader(body); err != nil {
		return resp, err
	}
	for {
		body, err := fr.Next()
		if errors.Is(err, io.EOF) {
			return resp, nil // exo's read_message returns None at the end of the stream
		}
		if err != nil {
			return resp, err
		}
		m, err := kvwire.DecodeMessage(body)
		if err != nil {
			return resp, err
		}
		m = Clone(m)
		resp.Messages = append(resp.Messages, m)
		switch m := m.(type) {
		case *kvwire.Done:
			return resp, nil
		case *kvwire.Error:
			return resp, &kvwire.RemoteError{Code: m.Code, Message: m.Message}
		}
	}
}

// Clone returns a deep copy of m that owns its memory.
func Clone(m kvwire.Message) kvwire.Message {
	switch m := m.(type) {
	case *kvwire.KVChunk:
		c := *m
		c.Keys = append([]byte{}, m.Keys...)
		c.Values = append([]byte{}, m.Values...)
		return &c
	case *kvwire.ArraysState:
		a := *m
		a.Arrays = make([]kvwire.TensorBlob, len(m.Arrays))
		for i, t := range m.Arrays {
			a.Arrays[i] = kvwire.TensorBlob{DType: t.DType, Shape: append([]int{}, t.Shape...),
				Data: append([]byte{}, t.Data...)}
		}
		return &a
	case *kvwire.Done:
		d := *m
		return &d
	case *kvwire.Error:
		e := *m
		return &e
	}
	return m
}
