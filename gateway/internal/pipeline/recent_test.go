package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

func TestRecentRingKeepsTheLast(t *testing.T) {
	t.Parallel()
	var r Recent
	t0 := time.Now()
	for i := range RecentCapacity + 10 {
		r.add(RecentRequest{RequestRecord: client.RequestRecord{RequestID: fmt.Sprint(i), Start: t0.Add(time.Duration(i) * time.Second)}})
	}
	all, last := r.Since(0, time.Time{})
	if len(all) != RecentCapacity || last != RecentCapacity+10 {
		t.Fatalf("%d records, last %d", len(all), last)
	}
	if all[0].RequestID != "10" || all[len(all)-1].RequestID != fmt.Sprint(RecentCapacity+9) {
		t.Errorf("oldest %s, newest %s", all[0].RequestID, all[len(all)-1].RequestID)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 {
			t.Fatalf("seq %d after %d", all[i].Seq, all[i-1].Seq)
		}
	}
	tail, _ := r.Since(last-3, time.Time{})
	if len(tail) != 3 || tail[0].Seq != last-2 {
		t.Errorf("since %d: %+v", last-3, tail)
	}
	byTime, _ := r.Since(0, t0.Add(time.Duration(RecentCapacity+5)*time.Second))
	if len(byTime) != 5 {
		t.Errorf("since a time: %d records", len(byTime))
	}
	var empty Recent
	if recs, last := empty.Since(0, time.Time{}); len(recs) != 0 || last != 0 {
		t.Errorf("an empty ring: %v %d", recs, last)
	}
}

func TestLastObject(t *testing.T) {
	t.Parallel()
	sse := `data: {"choices":[{"delta":{"content":"he said \"timings\": {}"}}],"usage":null}` + "\n\n" +
		`data: {"choices":[{"finish_reason":"stop"}],"timings":{"prefill_source":"remote","route":{"decode_node":"b"}},"usage":null}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}` + "\n\ndata: [DONE]\n\n"
	tests := []struct {
		name, in, key, want string
	}{
		{"the final chunk's timings", sse, `"timings":`, `{"prefill_source":"remote","route":{"decode_node":"b"}}`},
		{"usage past the nulls", sse, `"usage":`, `{"prompt_tokens":9,"completion_tokens":3}`},
		{"only nulls", `{"usage":null}`, `"usage":`, ""},
		{"cut off", `{"timings":{"queue_ms":1`, `"timings":`, ""},
		{"absent", `{"a":1}`, `"timings":`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(lastObject([]byte(tc.in), tc.key)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRecentTail(t *testing.T) {
	t.Parallel()
	var tail []byte
	tail = keepTail(tail, []byte(strings.Repeat("x", recentTail-5)))
	tail = keepTail(tail, []byte("0123456789"))
	if len(tail) != recentTail || !strings.HasSuffix(string(tail), "0123456789") {
		t.Errorf("tail of %d bytes ending %q", len(tail), tail[len(tail)-10:])
	}
	tail = keepTail(tail, []byte(strings.Repeat("y", 2*recentTail)))
	if len(tail) != recentTail || strings.Contains(string(tail), "x") {
		t.Errorf("a chunk larger than the tail: %d bytes", len(tail))
	}
}

func TestCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"héllo", 2, "h"}, // not half of é
		{"héllo", 3, "hé"},
		{"", 3, ""},
	} {
		if got := cut(tc.in, tc.n); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestRecentRecordJSON: a record carries the answer's timings as rendered (a null and a field the client does
// not type stay), passes through a peer's decoding unchanged, and reads as the client's typed record.
func TestRecentRecordJSON(t *testing.T) {
	t.Parallel()
	timings := `{"prefill_source":"remote","queue_ms":1.5,"remote_prefill":{"instance_id":"p","fallback_reason":null},"new_field":7}`
	rec := RecentRequest{RequestRecord: client.RequestRecord{Seq: 4, RequestID: "r", Status: 200,
		Route: client.RequestRoute{EntryNode: "a", Forwarded: true}, Usage: &client.RequestUsage{PromptTokens: 9}},
		Timings: json.RawMessage(timings)}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	if string(fields["timings"]) != timings {
		t.Errorf("timings %s, want them as rendered: %s", fields["timings"], timings)
	}
	var peer RecentRequest
	if err := json.Unmarshal(data, &peer); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(peer); string(again) != string(data) {
		t.Errorf("a peer's record re-rendered:\n%s\nwant\n%s", again, data)
	}
	var got client.RequestRecord
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Timings == nil || got.Timings.PrefillSource != "remote" || got.Timings.Remote == nil || got.Timings.Remote.InstanceID != "p" ||
		got.Seq != 4 || !got.Route.Forwarded || got.Usage == nil || got.Usage.PromptTokens != 9 {
		t.Errorf("the client reads %+v (timings %+v)", got, got.Timings)
	}
}
