package apicore

import (
	"encoding/json"
	"testing"
)

func TestAppendString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `quote " backslash \ slash /`, "ctl \x00\x01\x1f\t\n\r", "utf8 é 漢字 🙂", "bad \xff\xfe utf8", "line sep \u2028 \u2029", "<html>&"} {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: not valid JSON: %s (%v)", s, got, err)
		}
		std, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(std, &want)
		if back != want {
			t.Errorf("%q: round trip gave %q", s, back)
		}
	}
}
