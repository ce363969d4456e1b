package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// fakeStream serves /v1/completions as a stream of the given lines, flushed one by one with a pause, and
// checks the request the benchmark sends.
func fakeStream(t *testing.T, lines []string, pause time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("the request is not JSON: %v", err)
		}
		if body["stream"] != true || body["ignore_eos"] != true || body["logprobs"] != float64(0) || r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("request %v, authorization %q", body, r.Header.Get("Authorization"))
		}
		if p, ok := body["prompt"].([]any); !ok || len(p) != 3 {
			t.Errorf("prompt %v, want the token ids", body["prompt"])
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range lines {
			fmt.Fprintf(w, "data: %s\n\n", l)
			w.(http.Flusher).Flush()
			time.Sleep(pause)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func tok(text string, n int) string {
	toks := make([]string, n)
	for i := range toks {
		toks[i] = `"t"`
	}
	return fmt.Sprintf(`{"choices":[{"text":%q,"index":0,"logprobs":{"tokens":[%s]},"finish_reason":null}],"usage":null}`, text, strings.Join(toks, ","))
}

const finalChunk = `{"choices":[{"text":"!","index":0,"logprobs":null,"finish_reason":"length"}],"timings":{"prefill_source":"remote","queue_ms":0.1,"prefill_ms":50,"first_token_ms":51,"decode_ms":20,"total_ms":71,"remote_prefill":{"endpoint":"127.0.0.1:9","instance_id":"p-0","tokens":2,"bytes":4096,"wait_ms":1.5,"transfer_ms":40,"ingest_ms":2,"attempts":1,"fallback_reason":null,"exact":true},"route":{"entry_node":"d","decode_node":"d","decode_instance":"d-0","prefill_instance":"p-0","prefill_node":"p","prefill_address":"127.0.0.1:9","forwarded":false,"routing_ms":0.05}},"usage":null}`

const usageChunk = `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`

func TestStream(t *testing.T) {
	t.Parallel()
	srv := fakeStream(t, []string{tok(" the", 1), tok("", 1), tok(" light house", 2), finalChunk, usageChunk, "[DONE]"}, 5*time.Millisecond)
	a := newAPI("k", "")
	var seen int
	c, err := a.stream(context.Background(), srv.URL, completionRequest{Model: "m", Prompt: []int32{1, 2, 3}, MaxTokens: 4}, func(time.Time) { seen++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Stamps) != 4 || seen != 4 {
		t.Fatalf("%d stamps, %d callbacks, want one per token (4)", len(c.Stamps), seen)
	}
	if c.PromptTokens != 3 || c.CompletionTokens != 4 || c.Text.String() != " the light house!" {
		t.Errorf("usage %d/%d, text %q", c.PromptTokens, c.CompletionTokens, c.Text.String())
	}
	if c.TTFT() <= 0 || c.TTFT() > c.Elapsed {
		t.Errorf("TTFT %v of %v", c.TTFT(), c.Elapsed)
	}
	// The server pauses 5 ms between chunks, but what the client sees depends on when it is scheduled (a late
	// read of the first chunk shortens the first gap to anything): chunks read apart have gaps above zero, and
	// the tokens of one chunk share its stamp.
	itl := c.ITLs()
	if len(itl) != 3 || itl[0] <= 0 || itl[1] <= 0 || itl[2] != 0 {
		t.Errorf("gaps %v: want a gap above 0 between chunks and 0 within one", itl)
	}
	if tps := c.GenerationTPS(); tps <= 0 {
		t.Errorf("generation tps %v", tps)
	}
	tm := c.Timings
	if tm == nil || tm.PrefillSource != "remote" || tm.Remote == nil || tm.Remote.Bytes != 4096 || tm.Remote.TransferMs != 40 ||
		tm.Route == nil || tm.Route.DecodeInstance != "d-0" {
		t.Errorf("timings %+v", tm)
	}
}

func TestStreamFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"an error event", []string{tok("a", 1), `{"error":{"message":"the engine failed","type":"server_error"}}`}, "the stream failed: the engine failed"},
		{"no final chunk", []string{tok("a", 1), "[DONE]"}, "without a final chunk"},
		{"cut off", []string{tok("a", 1)}, "without a final chunk"},
		{"not JSON", []string{"{nope"}, "not JSON"},
		{"a line too long", []string{`{"choices":[{"text":"` + strings.Repeat("x", maxSSELine) + `"}]}`}, "a stream line is longer than 16 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := fakeStream(t, c.lines, 0)
			_, err := newAPI("k", "").stream(context.Background(), srv.URL, completionRequest{Model: "m", Prompt: []int32{1, 2, 3}, MaxTokens: 4}, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want an error saying %q", err, c.want)
			}
		})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(429)
		fmt.Fprint(w, `{"error":{"message":"too many requests","type":"rate_limit_error"}}`)
	}))
	defer srv.Close()
	_, err := newAPI("", "").stream(context.Background(), srv.URL, completionRequest{Model: "m", Prompt: []int32{1}, MaxTokens: 1}, nil)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Message != "too many requests" || errorKind(err) != "HTTP 429: too many requests" {
		t.Errorf("a refusal: %v", err)
	}
}

// TestStreamLongLine reads a chunk longer than the reader's buffer whole.
func TestStreamLongLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", 300<<10)
	srv := fakeStream(t, []string{tok(long, 1), tok("b", 1), finalChunk, usageChunk, "[DONE]"}, 0)
	c, err := newAPI("k", "").stream(context.Background(), srv.URL, completionRequest{Model: "m", Prompt: []int32{1, 2, 3}, MaxTokens: 4}, nil)
	if err != nil || len(c.Stamps) != 2 || !strings.HasPrefix(c.Text.String(), long) {
		t.Fatalf("%v: %d tokens, text of %d bytes", err, len(c.Stamps), c.Text.Len())
	}
}

func TestRandomPrompt(t *testing.T) {
	t.Parallel()
	a, b, c := randomPrompt(1, 256), randomPrompt(1, 256), randomPrompt(2, 256)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same seed gave two prompts")
	}
	same := 0
	for i := range 64 {
		if a[i] == c[i] {
			same++
		}
	}
	if same > 8 {
		t.Errorf("two seeds share %d of the first 64 tokens", same)
	}
	for _, id := range a {
		if id < 10 || id > 255 {
			t.Fatalf("token id %d outside 10..255", id)
		}
	}
}

func TestPickPair(t *testing.T) {
	t.Parallel()
	in := func(id, node, role, kv string) instance {
		return instance{ID: id, Model: "m", Node: node, Role: role, Status: "ready", KVEndpoint: kv}
	}
	cluster := []instance{
		in("a-0", "a", "both", "10.0.0.1:7000"),
		in("b-0", "b", "both", "10.0.0.2:7000"),
		in("c-0", "c", "decode", ""),
		in("d-0", "d", "prefill", "10.0.0.4:7000"),
		{ID: "e-0", Model: "m", Node: "e", Status: "loading", KVEndpoint: "10.0.0.5:7000"},
		{ID: "x-0", Model: "other", Node: "a", Status: "ready", Role: "both", KVEndpoint: "10.0.0.1:7001"},
	}
	for _, c := range []struct {
		name       string
		o          PDOptions
		all        []instance
		wantP      string
		wantD      string
		wantErrHas string
	}{
		{"roles first", PDOptions{Model: "m"}, cluster, "d-0", "c-0", ""},
		{"any model with two nodes", PDOptions{}, cluster, "d-0", "c-0", ""},
		{"by node", PDOptions{Model: "m", PrefillNode: "a", DecodeNode: "b"}, cluster, "a-0", "b-0", ""},
		{"by id", PDOptions{PrefillInstance: "b-0", DecodeInstance: "a-0"}, cluster, "b-0", "a-0", ""},
		{"decode named, prefill picked off its node", PDOptions{DecodeInstance: "d-0"}, cluster, "", "", "has role prefill"},
		{"a loading instance", PDOptions{PrefillInstance: "e-0", DecodeInstance: "a-0"}, cluster, "", "", "is loading, not ready"},
		{"an unknown instance", PDOptions{PrefillInstance: "zz", DecodeInstance: "a-0"}, cluster, "", "", "no such instance"},
		{"no KV on the prefill side", PDOptions{PrefillInstance: "c-0", DecodeInstance: "a-0"}, cluster, "", "", "serves no KV"},
		{"same node", PDOptions{PrefillInstance: "x-0", DecodeInstance: "a-0"}, cluster, "", "", "on the same node a"},
		{"one node only", PDOptions{Model: "m"}, cluster[:1], "", "", "no ready instance"},
		{"no model on two nodes", PDOptions{}, []instance{cluster[0], cluster[5]}, "", "", "no model has ready instances on two nodes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, d, err := pickPair(c.all, c.o)
			if c.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErrHas) {
					t.Errorf("pickPair = %s, %s, %v; want an error saying %q", p.ID, d.ID, err, c.wantErrHas)
				}
				return
			}
			if err != nil || p.ID != c.wantP || d.ID != c.wantD {
				t.Errorf("pickPair = %s, %s, %v; want %s, %s", p.ID, d.ID, err, c.wantP, c.wantD)
			}
		})
	}
}

func TestCheckRun(t *testing.T) {
	t.Parallel()
	ok := &completion{Timings: &client.Timings{}, CompletionTokens: 8}
	for _, c := range []struct {
		name string
		row  PDRun
		c    *completion
		err  error
		exp  expectation
		want string
	}{
		{"as meant", PDRun{TG: 8, DecodedOn: "d", PrefillSource: "remote"}, ok, nil, expectation{decodeOn: "d", remote: true}, ""},
		{"local as meant", PDRun{TG: 8, DecodedOn: "p", PrefillSource: "local"}, ok, nil, expectation{decodeOn: "p", remote: false}, ""},
		{"an error", PDRun{}, nil, errors.New("boom"), expectation{decodeOn: "d", remote: true}, "boom"},
		{"no timings", PDRun{}, &completion{}, nil, expectation{decodeOn: "d", remote: true}, "no timings"},
		{"elsewhere", PDRun{TG: 8, DecodedOn: "p"}, ok, nil, expectation{decodeOn: "d", remote: false}, "decoded on p, not on d"},
		{"a fallback", PDRun{TG: 8, DecodedOn: "d", PrefillSource: "local", RemotePrefill: &client.RemotePrefill{FallbackReason: "peer busy"}}, ok, nil, expectation{decodeOn: "d", remote: true}, "prefilled local, not remotely: peer busy"},
		{"no endpoint", PDRun{TG: 8, DecodedOn: "d", PrefillSource: "local"}, ok, nil, expectation{decodeOn: "d", remote: true}, "the router offered no prefill endpoint"},
		{"remote in a baseline", PDRun{TG: 8, DecodedOn: "d", PrefillSource: "remote"}, ok, nil, expectation{decodeOn: "d", remote: false}, "prefilled remotely in a phase without P/D"},
		{"short", PDRun{TG: 9, DecodedOn: "d", PrefillSource: "remote"}, ok, nil, expectation{decodeOn: "d", remote: true}, "generated 8 tokens, not 9"},
		{"auto anywhere", PDRun{TG: 8, DecodedOn: "p", PrefillSource: "local"}, ok, nil, expectation{any: true}, ""},
		{"auto remote", PDRun{TG: 8, DecodedOn: "d", PrefillSource: "remote"}, ok, nil, expectation{any: true}, ""},
		{"auto short", PDRun{TG: 9, DecodedOn: "d"}, ok, nil, expectation{any: true}, "generated 8 tokens, not 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := checkRun(c.row, c.c, c.err, c.exp); !strings.Contains(got, c.want) || (c.want == "") != (got == "") {
				t.Errorf("checkRun = %q, want %q", got, c.want)
			}
		})
	}
}
