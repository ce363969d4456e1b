package toolcall

import (
	"fmt"
	"reflect"
	"testing"
)

var fuzzFormats = []Format{
	{CallsNone, ReasoningNone}, {CallsHermes, ReasoningThink}, {CallsQwen3Coder, ReasoningNone},
	{CallsMistral, ReasoningMistral}, {CallsLlama3, ReasoningNone}, {CallsLlama3, ReasoningThink},
	{CallsHermes, ReasoningNone}, {CallsMistral, ReasoningNone}, {CallsHarmony, ReasoningHarmony},
}

// FuzzParser: any text in any format, whole or in pieces, parses without a panic to a result its deltas add up
// to, and the pieces do not change the result.
func FuzzParser(f *testing.F) {
	for _, c := range loadOutputs(f) {
		for i, ff := range fuzzFormats {
			if ff == c.format {
				f.Add(c.text, uint16(len(c.text)/2), uint8(i), uint8(0))
			}
		}
	}
	f.Add("<think>a</think><tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}</tool_call>", uint16(5), uint8(1), uint8(2))
	f.Add("[TOOL_CALLS][{\"name\":", uint16(13), uint8(3), uint8(0))
	f.Add("<|python_tag|>brave_search.call(query=[{'a': (1, -2.5e3)}])", uint16(20), uint8(4), uint8(0))
	tools := loadTools(f)
	f.Fuzz(func(t *testing.T, text string, cut uint16, format, flags uint8) {
		ff := fuzzFormats[int(format)%len(fuzzFormats)]
		opts := func() Options {
			o := Options{StartInReasoning: flags&2 != 0, NewID: NewIDs(ff.Calls, 9)}
			if flags&1 == 0 {
				o.Tools = tools
			}
			return o
		}
		whole, deltas, err := run(t, ff, opts(), []string{text})
		checkDeltas(t, whole, deltas)
		for _, e := range callErrors(t, err) {
			if e.Kind == nil || e.Error() == "" {
				t.Fatalf("bad error %#v", e)
			}
		}
		k := int(cut) % (len(text) + 1)
		size := 1 + int(cut)%7
		var pieces []string
		for rest := text[k:]; rest != ""; {
			n := min(size, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		for _, split := range [][]string{{text[:k], text[k:]}, append([]string{text[:k]}, pieces...)} {
			res, deltas, err2 := run(t, ff, opts(), split)
			checkDeltas(t, res, deltas)
			if !reflect.DeepEqual(res, whole) || fmt.Sprint(err) != fmt.Sprint(err2) {
				t.Fatalf("%v %q in %q:\n%+v %v\nwhole:\n%+v %v", ff, text, split, res, err2, whole, err)
			}
		}
	})
}
