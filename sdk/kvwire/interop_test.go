package kvwire_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// These tests run npm @msgpack/msgpack (pinned in testdata/node) as an independent exo-shaped peer.

func peerScript(t *testing.T) string {
	t.Helper()
	testnode.Module(t, "@msgpack/msgpack")
	p, err := filepath.Abs(filepath.Join("testdata", "msgpack_peer.js"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pattern is msgpack_peer.js's tensor pattern: byte i is (i*31 + seed) mod 256.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + seed)
	}
	return b
}

func TestNodeFramesDecode(t *testing.T) {
	t.Parallel()
	out := testnode.Run(t, peerScript(t), nil, "frames")
	var got [][]byte
	for _, line := range strings.Fields(string(out)) {
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	long := kvwire.Request{RequestID: strings.Repeat("r", 40), ModelID: strings.Repeat("m", 300), StartPos: 69999,
		TokenIDs: make([]int32, 70000)}
	for i := range long.TokenIDs {
		long.TokenIDs[i] = int32(i * 7919 % 128256)
	}
	big := 64 * 8 * 128 * 2
	want := []struct {
		golden string
		decode func([]byte) (any, error)
		value  any
	}{
		{"request.hex", decodeAny(kvwire.DecodeRequest), goldenRequest},
		{"header.hex", decodeAny(kvwire.DecodeHeader), goldenHeader},
		{"header_error.hex", decodeAny(kvwire.DecodeHeader), kvwire.Header{DType: kvwire.Float32}},
		{"kv_chunk.hex", decodeAny(kvwire.DecodeMessage), goldenMessages[0].msg},
		{"arrays_state.hex", decodeAny(kvwire.DecodeMessage), goldenMessages[2].msg},
		{"done.hex", decodeAny(kvwire.DecodeMessage), goldenMessages[4].msg},
		{"error.hex", decodeAny(kvwire.DecodeMessage), goldenMessages[5].msg},
		{"", decodeAny(kvwire.DecodeMessage), &kvwire.KVChunk{LayerIdx: 31, NumTokens: 64, NHeads: 8, HeadDim: 128,
			DType: kvwire.BFloat16, Keys: pattern(big, 1), Values: pattern(big, 2)}},
		{"", decodeAny(kvwire.DecodeRequest), long},
	}
	if len(got) != len(want) {
		t.Fatalf("node printed %d frames, want %d", len(got), len(want))
	}
	for i, w := range want {
		if w.golden != "" && !bytes.Equal(got[i], readHex(t, w.golden)) {
			t.Errorf("frame %d: @msgpack/msgpack's bytes differ from %s\n got % x", i, w.golden, got[i])
		}
		// Through the frame reader, as off the wire.
		body, err := kvwire.NewFrameReader(bytes.NewReader(got[i]), 0).Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		v, err := w.decode(body)
		if err != nil || !reflect.DeepEqual(v, w.value) {
			t.Errorf("frame %d: decoded %v, %v", i, clipValue(v), err)
		}
	}
}

func decodeAny[T any](f func([]byte) (T, error)) func([]byte) (any, error) {
	return func(b []byte) (any, error) { v, err := f(b); return v, err }
}

func clipValue(v any) string {
	s := fmt.Sprintf("%+v", v)
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

func TestNodeDecodesOurFrames(t *testing.T) {
	t.Parallel()
	bin := func(b []byte) string { return `{"$bin":"` + hex.EncodeToString(b) + `"}` }
	big := &kvwire.KVChunk{LayerIdx: 7, NumTokens: 64, NHeads: 8, HeadDim: 128, DType: kvwire.Float16,
		Keys: pattern(64*8*128*2, 3), Values: pattern(64*8*128*2, 4)}
	big.CRC32C, big.HasCRC32C = kvwire.ChunkCRC32C(big.Keys, big.Values), true
	var stream []byte
	var want []string
	// add(js)(body, err) appends a frame and the JSON node must decode it to.
	add := func(js string) func([]byte, error) {
		return func(body []byte, err error) {
			if err != nil {
				t.Fatal(err)
			}
			stream = append(stream, frameOf(body)...)
			want = append(want, js)
		}
	}
	add(`{"request_id":"req-1","model_id":"llama","token_ids":[1,200,300,70000],` +
		`"start_pos":2,"duet_checksum":"crc32c","duet_auth_ts":1700000000000,"duet_auth_nonce":` + bin(goldenRequestExt.Auth.Nonce) +
		`,"duet_auth_mac":` + bin(goldenRequestExt.Auth.MAC) + `}`)(kvwire.AppendRequest(nil, &goldenRequestExt))
	ack := goldenHeader
	ack.Checksum = kvwire.ChecksumCRC32C
	add(`{"request_id":"req-1","model_id":"llama","num_layers":32,"dtype":"bfloat16",` +
		`"start_pos":2,"duet_checksum":"crc32c"}`)(kvwire.AppendHeader(nil, &ack))
	add(fmt.Sprintf(`{"type":"kv_chunk","layer_idx":7,"num_tokens":64,"n_heads":8,`+
		`"head_dim":128,"dtype":"float16","keys":%s,"values":%s,"duet_crc32c":%d}`, bin(big.Keys), bin(big.Values), big.CRC32C))(kvwire.AppendMessage(nil, big))
	add(`{"type":"arrays_state","layer_idx":1,"arrays":[{"dtype":"float32",` +
		`"shape":[2],"data":` + bin(f32Data) + `}],"duet_crc32c":2855727817}`)(kvwire.AppendMessage(nil, goldenMessages[3].msg))
	add(`{"type":"done","total_tokens":1048576}`)(kvwire.AppendMessage(nil, &kvwire.Done{TotalTokens: 1 << 20}))
	add(`{"type":"error","code":401,"message":"authentication required: é"}`)(kvwire.AppendMessage(nil, &kvwire.Error{Code: 401, Message: "authentication required: é"}))

	out := testnode.Run(t, peerScript(t), stream, "decode")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("node decoded %d frames, want %d", len(lines), len(want))
	}
	for i := range want {
		// Compare as JSON text, so key order counts too.
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(want[i])); err != nil {
			t.Fatal(err)
		}
		if lines[i] != compact.String() {
			t.Errorf("frame %d: node decoded\n%.400s\nwant\n%.400s", i, lines[i], compact.String())
		}
	}
}

// A plain exo client on @msgpack/msgpack fetches from our server.
func TestNodeClientAgainstOurServer(t *testing.T) {
	t.Parallel()
	script := peerScript(t)
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	req := requestFor(smallShape)
	reqJSON, _ := json.Marshal(map[string]any{"request_id": req.RequestID, "model_id": req.ModelID,
		"token_ids": req.TokenIDs, "start_pos": req.StartPos})
	out := testnode.Run(t, script, reqJSON, "client", addr)

	var got struct {
		Header   map[string]any   `json:"header"`
		Messages []map[string]any `json:"messages"`
		SHA256   string           `json:"sha256"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	wantHeader := map[string]any{"request_id": "req-42", "model_id": "test-model", "num_layers": 4.0,
		"dtype": "bfloat16", "start_pos": 10.0}
	if !reflect.DeepEqual(got.Header, wantHeader) {
		t.Fatalf("header %v", got.Header)
	}
	h := sha256.New()
	chunks := kvwiretest.Chunks(smallShape)
	for _, c := range chunks {
		h.Write(c.Keys)
		h.Write(c.Values)
	}
	if len(got.Messages) != len(chunks)+1 || got.SHA256 != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("%d messages, sha256 %s", len(got.Messages), got.SHA256)
	}
	if last := got.Messages[len(chunks)]; last["type"] != "done" || last["total_tokens"] != 290.0 { // positions sent: 300 less start_pos 10
		t.Fatalf("last message %v", last)
	}
	if first := got.Messages[0]; first["type"] != "kv_chunk" || first["num_tokens"] != 64.0 || first["dtype"] != "bfloat16" {
		t.Fatalf("first message %v", first)
	}
}

// Our client, asking for every extension, fetches from a plain exo server on @msgpack/msgpack.
func TestOurClientAgainstNodeServer(t *testing.T) {
	t.Parallel()
	script := peerScript(t)
	cmd := exec.Command("node", script, "server")
	cmd.Dir = testnode.Dir(t)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("node server: %v\n%s", err, stderr.String())
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}

	req := &kvwire.Request{RequestID: "n1", ModelID: "m", TokenIDs: []int32{5, 6, 7, 8, 9}, StartPos: 2}
	var got []kvwire.Message
	res, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), fmt.Sprintf("127.0.0.1:%d", port), req,
		&kvwire.FetchOptions{Secret: []byte("s"), Checksum: true}, kvwire.Handler{
			OnChunk: func(c *kvwire.KVChunk) error { got = append(got, kvwiretest.Clone(c)); return nil },
		})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if res.Header != (kvwire.Header{RequestID: "n1", ModelID: "m", NumLayers: 3, DType: kvwire.Float16, StartPos: 2}) ||
		res.TotalTokens != 3 || res.Checksummed || len(got) != 3 {
		t.Fatalf("result %+v, %d chunks", res, len(got))
	}
	for layer, m := range got {
		c := m.(*kvwire.KVChunk)
		want := &kvwire.KVChunk{LayerIdx: layer, NumTokens: 3, NHeads: 2, HeadDim: 16, DType: kvwire.Float16,
			Keys: pattern(3*2*16*2, 2*layer), Values: pattern(3*2*16*2, 2*layer+1)}
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("layer %d: %+v", layer, c)
		}
	}
}
