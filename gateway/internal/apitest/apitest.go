// Package apitest holds what the tests of the API dialect packages (openai, responses, anthropic, ollama)
// share, so that each keeps only its own dialect's fixtures: golden files under testdata (rewritten with
// -update), the engine events and results a generation gives, the response metadata of a request the
// gateway forwarded and prefilled remotely, and the framing of server-sent events.
//
// A dialect's test turns what the engine would stream (Text, Reasoning, Calls, Final; Result collects them
// as the gateway does) into its wire format and compares it with a golden file (Golden, GoldenJSON); a stream's
// events come back apart with SSE for the checks a client would make.
//
// Only tests import it. Package openai's tests that use it are in package openai_test, since apitest itself
// imports openai.
package apitest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Golden compares got with the file testdata/name, or rewrites that file first when the test runs with
// -update.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (run go test -update to accept):\n%s", name, path, got)
	}
}

// GoldenJSON checks that got is valid JSON and compares it, indented (Indent), with testdata/name.
func GoldenJSON(t testing.TB, name string, got []byte) {
	t.Helper()
	Golden(t, name, Indent(t, got))
}

// Indent lays a JSON body out for review, two spaces a level and a newline at the end; it keeps the body's own
// order of keys, which is what clients see. A body that is not valid JSON fails the test.
func Indent(t testing.TB, b []byte) []byte {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("not valid JSON: %s", b)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// Ptr returns a pointer to a copy of v, for the optional fields of requests.
func Ptr[T any](v T) *T { return &v }

// Meta is the metadata of a response with the given id (and system fingerprint, when not empty), created at
// 1700000000 by model "m".
func Meta(id, fingerprint string) apicore.Meta {
	return apicore.Meta{ID: id, Created: 1700000000, Model: "m", Fingerprint: fingerprint}
}

// Routed is m with the route of a request that entered at n3, was forwarded to n2 and prefilled on n1.
func Routed(m apicore.Meta) apicore.Meta {
	m.Route = &apicore.Route{EntryNode: "n3", DecodeNode: "n2", DecodeInstance: "n2-0", PrefillInstance: "n1-0", PrefillNode: "n1",
		PrefillAddress: "127.0.0.1:7000", Forwarded: true,
		Reason: "auto: remote 14.9 s (first token 2.16 s) vs local 32.7 s", Time: 250 * time.Microsecond, Admission: 40 * time.Microsecond}
	return m
}

// Final is the last event of a generation that was prefilled locally and ended for reason, with usage and
// timings of 1 ms queued, 2 ms prefilling, the first token at 3 ms, 4 ms decoding and 7 ms in all.
func Final(reason engine.FinishReason, usage engine.Usage) *engine.Final {
	return &engine.Final{
		FinishReason: reason,
		Usage:        usage,
		Timings: engine.Timings{Queue: time.Millisecond, Prefill: 2 * time.Millisecond, FirstToken: 3 * time.Millisecond,
			Decode: 4 * time.Millisecond, Total: 7 * time.Millisecond, PrefillSource: engine.PrefillLocal},
	}
}

// Text is a token event of answer text.
func Text(s string) engine.Event { return engine.Event{Token: &engine.Token{Text: s}} }

// Reasoning is a token event of reasoning text.
func Reasoning(s string) engine.Event { return engine.Event{Token: &engine.Token{Reasoning: s}} }

// Calls is a token event of tool-call deltas.
func Calls(d ...engine.ToolCallDelta) engine.Event {
	return engine.Event{Token: &engine.Token{ToolCalls: d}}
}

// Logprob is token's log-probability v, with itself and "x" (at alt) as its top alternatives.
func Logprob(token string, v, alt float64) *engine.Logprob {
	return &engine.Logprob{Token: token, Bytes: []byte(token), Logprob: v,
		Top: []engine.TopLogprob{{ID: 1, Token: token, Bytes: []byte(token), Logprob: v}, {ID: 2, Token: "x", Bytes: []byte("x"), Logprob: alt}}}
}

// Result collects a generation's events as the gateway does for a whole answer.
func Result(events ...engine.Event) *apicore.Result {
	r := &apicore.Result{}
	for _, ev := range events {
		r.Add(ev)
	}
	return r
}

// Event is one server-sent event: the name on its event: line and the payload of its data: line.
type Event struct {
	Name string
	Data []byte
}

// SSE splits a stream of named events, checking the framing that OpenAI's and Anthropic's SDKs rely on: every
// event is one event: line and one data: line, events are separated by a blank line, and there is one at least.
func SSE(t testing.TB, stream []byte) []Event {
	t.Helper()
	var out []Event
	for _, block := range strings.SplitAfter(string(stream), "\n\n") {
		if block == "" {
			continue
		}
		ev, data, ok := strings.Cut(strings.TrimSuffix(block, "\n\n"), "\n")
		name, ok1 := strings.CutPrefix(ev, "event: ")
		payload, ok2 := strings.CutPrefix(data, "data: ")
		if !ok || !ok1 || !ok2 || strings.Contains(payload, "\n") {
			t.Fatalf("not an event of one event line and one data line: %q", block)
		}
		out = append(out, Event{Name: name, Data: []byte(payload)})
	}
	if len(out) == 0 {
		t.Fatalf("no events in %q", stream)
	}
	return out
}
