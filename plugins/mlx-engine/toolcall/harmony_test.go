package toolcall

import (
	"reflect"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
)

// TestHarmonyStreaming feeds a harmony output in the pieces a gpt-oss tokenizer gives (each marker one token)
// and checks what each piece releases: reasoning and content as they come, never a piece of a marker, and a
// call's start as soon as its header ends, before its arguments.
func TestHarmonyStreaming(t *testing.T) {
	t.Parallel()
	f := Format{Calls: CallsHarmony, Reasoning: ReasoningHarmony}
	p, err := NewParser(f, Options{Tools: loadTools(t), NewID: func() string { return "call_1" }})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		piece string
		want  []Delta
	}{
		{"<|channel|>", nil},
		{"analysis", nil},
		{"<|message|>", nil},
		{"Need", []Delta{{Kind: Reasoning, Text: "Need"}}},
		{" the time", []Delta{{Kind: Reasoning, Text: " the time"}}},
		{".\n", []Delta{{Kind: Reasoning, Text: "."}}}, // trailing whitespace waits
		{"<|end|>", nil},
		{"<|start|>", nil},
		{"assistant", nil},
		{"<|channel|>", nil},
		{"commentary", nil},
		{"<|message|>", nil},
		{"One moment", []Delta{{Kind: Content, Text: "One moment"}}},
		{"<|end|>", nil},
		{"<|start|>", nil},
		{"assistant", nil},
		{"<|channel|>", nil},
		{"commentary to", nil},
		{"=functions.get", nil},
		{"_time <|constrain|>", nil},
		{"json", nil},
		{"<|message|>", []Delta{{Kind: CallStart, Index: 0, ID: "call_1", Name: "get_time"}}},
		{`{"timezone": `, []Delta{{Kind: CallArguments, Index: 0, Text: `{"timezone":`}}},
		{`"Europe/`, []Delta{{Kind: CallArguments, Index: 0, Text: `"Europe/`}}},
		{`Paris"}`, []Delta{{Kind: CallArguments, Index: 0, Text: `Paris"}`}}},
	}
	for i, s := range steps {
		if got := p.Feed(s.piece); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: Feed(%q) = %+v, want %+v", i, s.piece, got, s.want)
		}
	}
	res, last, err := p.Finish()
	if err != nil || len(last) != 0 {
		t.Fatalf("Finish: deltas %+v, error %v", last, err)
	}
	want := Result{Content: "One moment", Reasoning: "Need the time.",
		Calls: []Call{{Index: 0, ID: "call_1", Name: "get_time", Arguments: `{"timezone":"Europe/Paris"}`}}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result %+v, want %+v", res, want)
	}
}

func TestHarmonyMarkersAreSpecialTokens(t *testing.T) {
	t.Parallel()
	tok, err := tokenizer.Load(modelDir(t, "tok:gptoss"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range (Format{Calls: CallsHarmony, Reasoning: ReasoningHarmony}).Markers() {
		id, ok := tok.TokenID(m)
		if !ok || !tok.IsSpecial(id) {
			t.Errorf("%s: id %d, found %v: not one special token of gpt-oss's vocabulary", m, id, ok)
		}
	}
}
