package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// send makes a plain HTTP request, for what the typed client does not speak (other APIs' shapes, forged hop
// headers, the dashboard's files), and returns the answer with its body read whole. A body (none when empty)
// goes as JSON; header sets each name to its value.
func send(t *testing.T, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return resp, data
}

// headerPairs is header given as name, value, name, value...
func headerPairs(pairs ...string) map[string]string {
	h := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return h
}

// chatText posts a chat completion body to g with header and returns the answer's text and its timings; an
// answer other than 200 with one choice fails the test.
func chatText(t *testing.T, g *gateway, body string, header map[string]string) (string, map[string]any) {
	t.Helper()
	resp, data := send(t, http.MethodPost, g.url+"/v1/chat/completions", body, header)
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Timings map[string]any `json:"timings"`
	}
	if err := json.Unmarshal(data, &out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
		t.Fatalf("status %d: %v: %s", resp.StatusCode, err, data)
	}
	return out.Choices[0].Message.Content, out.Timings
}
