package forward

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRouteRoundTrip(t *testing.T) {
	t.Parallel()
	r := Route{EntryNode: "n3", DecodeNode: "n2", DecodeInstance: "n2-0", Attempt: 2,
		Prefill: []Endpoint{{InstanceID: "n1-0", Node: "n1", Address: "127.0.0.1:7000", Approximate: true}},
		Reason:  "auto: remote 14.9 s (first token 2.16 s) vs local 32.7 s", EstimateFirstToken: 2.16, EstimateTotal: 14.9}
	got, err := DecodeRoute(r.Encode())
	if err != nil || got.DecodeInstance != "n2-0" || got.Prefill[0] != r.Prefill[0] || got.Attempt != 2 ||
		got.Reason != r.Reason || got.EstimateFirstToken != 2.16 || got.EstimateTotal != 14.9 {
		t.Fatalf("%+v %v", got, err)
	}
	negative := Route{DecodeInstance: "d", EstimateFirstToken: 1, EstimateTotal: -1}.Encode()
	long := Route{DecodeInstance: "d", Reason: strings.Repeat("r", MaxReason+1)}.Encode()
	for _, bad := range []string{"", "!!", "bnVsbA-", strings.Repeat("A", maxRouteHeader+1), negative, long} {
		if _, err := DecodeRoute(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

func TestProof(t *testing.T) {
	t.Parallel()
	key, old, other := []byte("k1-k1-k1-k1-k1-k1"), []byte("k0-k0-k0-k0-k0-k0"), []byte("zz-zz-zz-zz-zz-zz")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier([][]byte{key, old})
	v.now = func() time.Time { return now }
	body := []byte(`{"model":"m"}`)
	route := Route{DecodeInstance: "d"}.Encode()
	sign := func(k []byte, at time.Time) string {
		return Proof(k, "POST", "/v1/chat/completions", "rid", route, body, at)
	}

	if err := v.Verify(sign(key, now), "POST", "/v1/chat/completions", "rid", route, body); err != nil {
		t.Fatalf("a good proof: %v", err)
	}
	if err := v.Verify(sign(old, now.Add(time.Second)), "POST", "/v1/chat/completions", "rid", route, body); err != nil {
		t.Fatalf("a proof with the previous key (rotation): %v", err)
	}
	p := sign(key, now.Add(2*time.Second))
	cases := map[string]func() error{
		"replayed": func() error {
			v.Verify(p, "POST", "/v1/chat/completions", "rid", route, body)
			return v.Verify(p, "POST", "/v1/chat/completions", "rid", route, body)
		},
		"other secret": func() error { return v.Verify(sign(other, now), "POST", "/v1/chat/completions", "rid", route, body) },
		"stale": func() error {
			return v.Verify(sign(key, now.Add(-2*AuthWindow)), "POST", "/v1/chat/completions", "rid", route, body)
		},
		"future": func() error {
			return v.Verify(sign(key, now.Add(2*AuthWindow)), "POST", "/v1/chat/completions", "rid", route, body)
		},
		"other body": func() error {
			return v.Verify(sign(key, now), "POST", "/v1/chat/completions", "rid", route, []byte("{}"))
		},
		"other path": func() error { return v.Verify(sign(key, now), "POST", "/v1/completions", "rid", route, body) },
		"other route": func() error {
			return v.Verify(sign(key, now), "POST", "/v1/chat/completions", "rid", Route{DecodeInstance: "x"}.Encode(), body)
		},
		"other request": func() error { return v.Verify(sign(key, now), "POST", "/v1/chat/completions", "rid2", route, body) },
		"missing":       func() error { return v.Verify("", "POST", "/v1/chat/completions", "rid", route, body) },
		"garbage":       func() error { return v.Verify("v1 x y", "POST", "/v1/chat/completions", "rid", route, body) },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, ErrBadProof) {
			t.Errorf("%s: %v, want ErrBadProof", name, err)
		}
	}
}
