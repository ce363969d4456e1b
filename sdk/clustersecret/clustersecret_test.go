package clustersecret

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// The derivation is part of the protocol between nodes (and between a gateway and its plugins' peers): the
// keys of a secret must never change.
func TestDeriveGolden(t *testing.T) {
	k, err := Derive([]byte("correct horse battery staple"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"gossip": hex.EncodeToString(k.Gossip), "kv": hex.EncodeToString(k.KV), "hop": hex.EncodeToString(k.Hop),
		"reasoning": hex.EncodeToString(k.Reasoning)}
	if len(golden) != 4 {
		t.Fatal("golden keys missing")
	}
	for name, want := range golden {
		if got[name] != want {
			t.Errorf("%s key %s, want %s", name, got[name], want)
		}
	}
	keys := [][]byte{k.Gossip, k.KV, k.Hop, k.Reasoning}
	for i := range keys {
		for j := range i {
			if bytes.Equal(keys[i], keys[j]) {
				t.Errorf("keys %d and %d are equal", j, i)
			}
		}
	}
	if _, err := Derive([]byte("short")); err == nil {
		t.Error("a 5-byte secret was accepted")
	}
}

// golden was computed independently, with Python's hmac module implementing RFC 5869.
var golden = map[string]string{
	"gossip":    "b0edfc4f8e76265e724d6dec51df4450b96ab046062a05e41c4fe96e84a72350",
	"kv":        "ad0e25db4b3eac111e54ae7ddb13f58ae00959d91f517c0e00345f3c9446bf9d",
	"hop":       "3c17adbcf975a74713c2c0f71d69fadbd6c3c196e151e9c6e5c4a1aaaaff70a1",
	"reasoning": "c2636d16314c0389cc21b1a4f6af15dc1ff03de09a8c4811e6aa817b131934a5",
}
