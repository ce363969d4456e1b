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
		"v1 (no body hash before the body)": func() error {
			f := strings.Fields(sign(key, now.Add(3*time.Second)))
			return v.Verify("v1 "+f[1]+" "+f[3], "POST", "/v1/chat/completions", "rid", route, body)
		},
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, ErrBadProof) {
			t.Errorf("%s: %v, want ErrBadProof", name, err)
		}
	}
}

// TestProofBeforeBody: the proof's head is checked before the body is read (a forged one costs no body), and
// the body read afterwards must be the one the proof covers.
func TestProofBeforeBody(t *testing.T) {
	t.Parallel()
	key := []byte("k1-k1-k1-k1-k1-k1")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier([][]byte{key})
	v.now = func() time.Time { return now }
	route := Route{DecodeInstance: "d"}.Encode()
	body := []byte(`{"model":"m"}`)
	p := Proof(key, "POST", "/v1/chat/completions", "rid", route, body, now)
	f := strings.Fields(p)
	forged := strings.Join([]string{f[0], f[1], f[2], strings.Repeat("A", len(f[3]))}, " ")
	if _, err := v.VerifyHead(forged, "POST", "/v1/chat/completions", "rid", route); !errors.Is(err, ErrBadProof) {
		t.Errorf("a forged MAC passed the head check: %v", err)
	}
	sum, err := v.VerifyHead(p, "POST", "/v1/chat/completions", "rid", route)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckBody(sum, []byte(`{"model":"other"}`)); !errors.Is(err, ErrBadProof) {
		t.Errorf("another body: %v", err)
	}
	if err := CheckBody(sum, body); err != nil {
		t.Errorf("the body: %v", err)
	}
	if _, err := v.VerifyHead(p, "POST", "/v1/chat/completions", "rid", route); !errors.Is(err, ErrBadProof) {
		t.Errorf("a replayed head: %v", err)
	}
}
