package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// api is what the benchmarks call duet's HTTP API with: the typed client of the cluster API (instances,
// links, state, router) for any gateway of the cluster, and the streamed completions it measures.
type api struct {
	http     *http.Client
	apiKey   string
	adminKey string // for the cluster API's writes; empty: apiKey
}

func newAPI(apiKey, adminKey string) *api {
	return &api{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}},
		apiKey: apiKey, adminKey: adminKey}
}

// at is the client of the gateway at base, sharing the benchmark's connections and keys.
func (a *api) at(base string) *client.Client {
	return client.New(base, client.WithHTTPClient(a.http), client.WithAPIKey(a.apiKey), client.WithAdminKey(a.adminKey))
}

// instance and link are the cluster API's, named briefly: the benchmarks pass them around a lot.
type (
	instance = client.Instance
	link     = client.Link
)

// waitUntil polls cond every 100 ms until it holds, the context ends or timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("waiting for %s: gave up after %s: %w", what, timeout, last)
			}
			return fmt.Errorf("waiting for %s: gave up after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// completion is one streamed completion as the client saw it.
type completion struct {
	Start   time.Time
	Elapsed time.Duration // until the stream ended
	// Stamps are the arrival times of the generated tokens since Start, one per token (tokens that arrived in
	// one read share a stamp).
	Stamps           []time.Duration
	PromptTokens     int
	CompletionTokens int
	Text             strings.Builder
	Timings          *client.Timings // the last chunk's
}

// TTFT is the time to the first token (0 without one).
func (c *completion) TTFT() time.Duration {
	if len(c.Stamps) == 0 {
		return 0
	}
	return c.Stamps[0]
}

// ITLs are the gaps between successive tokens.
func (c *completion) ITLs() []time.Duration {
	if len(c.Stamps) < 2 {
		return nil
	}
	out := make([]time.Duration, len(c.Stamps)-1)
	for i := range out {
		out[i] = c.Stamps[i+1] - c.Stamps[i]
	}
	return out
}

// GenerationTPS is exo's generation_tps: (tokens − 1) over the span from the first to the last token.
func (c *completion) GenerationTPS() float64 {
	if len(c.Stamps) < 2 {
		return 0
	}
	span := c.Stamps[len(c.Stamps)-1] - c.Stamps[0]
	if span <= 0 {
		return 0
	}
	return float64(len(c.Stamps)-1) / span.Seconds()
}

// completionRequest is a streamed /v1/completions request with a prompt of token ids: exact prompt lengths,
// whatever the tokenizer, and no chat template. EOS is ignored so that a run generates exactly MaxTokens
// tokens, as exo's bench endpoint bans EOS; logprobs 0 makes every token its own chunk, with its count.
type completionRequest struct {
	Model     string  `json:"model"`
	Prompt    []int32 `json:"prompt"`
	MaxTokens int     `json:"max_tokens"`
}

// stream sends req to base and reads the stream to its end; onToken, when set, is called with each token's
// arrival time. A stream that ends with an error event, or without its final chunk, is an error; the
// completion holds what arrived before it.
func (a *api) stream(ctx context.Context, base string, req completionRequest, onToken func(time.Time)) (*completion, error) {
	body, _ := json.Marshal(map[string]any{
		"model": req.Model, "prompt": req.Prompt, "max_tokens": req.MaxTokens, "temperature": 0,
		"ignore_eos": true, "logprobs": 0, "stream": true, "stream_options": map[string]bool{"include_usage": true},
	})
	hr, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	a.at(base).Authorize(hr, client.APIKey)
	c := &completion{Start: time.Now()}
	resp, err := a.http.Do(hr)
	if err != nil {
		return c, client.Unreachable("POST", base+"/v1/completions", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return c, client.ReadError(resp)
	}
	err = readSSE(resp.Body, c, onToken)
	c.Elapsed = time.Since(c.Start)
	return c, err
}

// chunk is one event of a completions stream.
type chunk struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens []string `json:"tokens"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Timings *client.Timings `json:"timings"`
	Usage   *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// maxSSELine bounds one line of a stream.
const maxSSELine = 16 << 20

// readSSE reads a completions stream into c.
func readSSE(r io.Reader, c *completion, onToken func(time.Time)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	finished, sawLogprobs := false, false
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: gather it whole, up to a bound (a chunk is a token or a final
			// chunk with usage and timings, far below it).
			long := bytes.Clone(line)
			for err == bufio.ErrBufferFull && len(long) <= maxSSELine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			if len(long) > maxSSELine {
				return fmt.Errorf("a stream line is longer than %d MiB", maxSSELine>>20)
			}
			line = long
		}
		now := time.Now()
		if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if string(data) == "[DONE]" {
				if !finished {
					return errors.New("the stream ended without a final chunk")
				}
				return nil
			}
			var ch chunk
			if jerr := json.Unmarshal(data, &ch); jerr != nil {
				return fmt.Errorf("a stream chunk is not JSON: %v", jerr)
			}
			if ch.Error != nil {
				return fmt.Errorf("the stream failed: %s", ch.Error.Message)
			}
			for _, choice := range ch.Choices {
				// With logprobs every token is counted in its chunk; a final chunk may still carry text held
				// back (an incomplete UTF-8 sequence) of tokens counted before. A server that sends no logprobs
				// gets a token per chunk of text.
				n := 0
				switch {
				case choice.Logprobs != nil:
					n, sawLogprobs = len(choice.Logprobs.Tokens), true
				case choice.Text != "" && choice.FinishReason == nil && !sawLogprobs:
					n = 1
				}
				for range n {
					c.Stamps = append(c.Stamps, now.Sub(c.Start))
					if onToken != nil {
						onToken(now)
					}
				}
				if c.Text.Len() < 200 {
					c.Text.WriteString(choice.Text)
				}
				if choice.FinishReason != nil {
					finished = true
				}
			}
			if ch.Timings != nil {
				c.Timings = ch.Timings
			}
			if ch.Usage != nil {
				c.PromptTokens, c.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
			}
		}
		if err == io.EOF {
			if finished {
				return nil
			}
			return errors.New("the stream ended without a final chunk")
		}
		if err != nil {
			return err
		}
	}
}

// randomPrompt is a prompt of n token ids drawn from 10..255, ids every vocabulary has (byte-level BPE and
// SentencePiece models alike), from a seeded generator: distinct seeds give prompts that share no prefix
// block, so neither a prefix cache nor the router's prefix affinity can shortcut a prefill.
func randomPrompt(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(10 + r.IntN(246))
	}
	return out
}
