package serfcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEncryptedKeyRotation runs an AES-GCM cluster through a full key rotation and checks that no member
// is ever seen other than alive meanwhile, that replication keeps working, that every keyring file ends
// with the new key only, and that nodes with a wrong key or no key cannot join.
func TestEncryptedKeyRotation(t *testing.T) {
	dir := t.TempDir()
	k1 := bytes.Repeat([]byte{0x11}, 32)
	k2 := bytes.Repeat([]byte{0x22}, 16)
	nodes := startCluster(t, clusterSize, func(i int, cfg *Config) {
		cfg.EncryptKey = k1
		cfg.KeyringFile = filepath.Join(dir, fmt.Sprintf("n%d.keyring", i))
	})

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var flaps []string
	var wg sync.WaitGroup
	for _, n := range nodes {
		ch := n.Subscribe(ctx)
		wg.Go(func() {
			for s := range ch {
				for _, m := range nodes {
					if node, _ := s.Node(m.id); node.Status != StatusAlive {
						mu.Lock()
						flaps = append(flaps, fmt.Sprintf("%s saw %s %q at v%d", n.id, m.id, node.Status, s.Version))
						mu.Unlock()
					}
				}
			}
		})
	}

	if err := nodes[0].InstallKey(k2); err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].UseKey(k2); err != nil {
		t.Fatal(err)
	}
	if err := nodes[4].RemoveKey(k1); err != nil {
		t.Fatal(err)
	}
	st, err := nodes[1].ListKeys()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(k2)
	if len(st.Keys) != 1 || st.Keys[b64] != clusterSize || st.PrimaryKeys[b64] != clusterSize {
		t.Fatalf("after rotation: %+v", st)
	}
	if err := nodes[3].PutInstance(testInstance("n3", "after-rotation")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			_, ok := s.Instance("n3/after-rotation")
			return ok, "write after rotation not replicated"
		})
	})
	// Serf rewrote every keyring file, so a restart comes back with the new key.
	for i := range clusterSize {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.keyring", i)))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := parseKeyring(b)
		if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], k2) {
			t.Fatalf("n%d keyring file holds %d keys (%v)", i, len(keys), err)
		}
	}

	// Joining with the wrong key or none fails, and the cluster does not grow.
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"wrong key", bytes.Repeat([]byte{0x33}, 32)}, {"no key", nil}} {
		cfg := testConfig(5)
		cfg.EncryptKey = tc.key
		intruder := startNode(t, cfg)
		if _, err := intruder.Join([]string{nodes[0].GossipAddr()}); err == nil {
			t.Errorf("%s: join succeeded", tc.name)
		}
		time.Sleep(300 * time.Millisecond)
		if got := len(nodes[0].Snapshot().Nodes); got != clusterSize {
			t.Errorf("%s: the cluster has %d members", tc.name, got)
		}
		if got := len(intruder.Snapshot().Nodes); got != 1 {
			t.Errorf("%s: the intruder sees %d members", tc.name, got)
		}
		intruder.stop()
	}

	cancel()
	wg.Wait()
	if len(flaps) > 0 {
		t.Fatalf("members flapped during rotation: %s", strings.Join(flaps, "; "))
	}
	var pulls uint64
	for _, n := range nodes {
		pulls += n.Stats().Pulls
	}
	if pulls == 0 {
		t.Fatal("no sealed state pull succeeded")
	}
}

func TestStateHandler(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 24)
	plainNode := startCluster(t, 1, nil)[0]
	sealedNode := startCluster(t, 1, func(_ int, cfg *Config) { cfg.NodeID = "sealed"; cfg.EncryptKey = key })[0]
	for _, n := range []*testNode{plainNode, sealedNode} {
		if err := n.PutInstance(testInstance(n.id, "a")); err != nil {
			t.Fatal(err)
		}
	}
	url := func(n *testNode) string { return "http://" + n.cfg.APIAddr + StatePath }
	get := func(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}

	t.Run("plain", func(t *testing.T) {
		resp, body := get(t, url(plainNode), nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s", resp.Status, body)
		}
		st, err := decodeState(body, plainNode.id, 100, time.Hour)
		if err != nil || len(st.entries) != 1 {
			t.Fatalf("decodeState: %v, %+v", err, st)
		}
	})
	t.Run("method", func(t *testing.T) {
		resp, err := http.Post(url(plainNode), "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("POST: %s", resp.Status)
		}
	})
	t.Run("sealed needs a challenge", func(t *testing.T) {
		for _, ch := range []string{"", "zz", hex.EncodeToString([]byte("short"))} {
			resp, _ := get(t, url(sealedNode), map[string]string{challengeHeader: ch})
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("challenge %q: %s", ch, resp.Status)
			}
		}
	})
	t.Run("sealed", func(t *testing.T) {
		challenge := make([]byte, challengeLen)
		_, _ = rand.Read(challenge)
		resp, body := get(t, url(sealedNode), map[string]string{challengeHeader: hex.EncodeToString(challenge)})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != sealedType {
			t.Fatalf("%s %s", resp.Status, body)
		}
		if bytes.Contains(body, []byte("n1/a")) || bytes.Contains(body, []byte("sealed/a")) {
			t.Fatal("sealed body contains plaintext")
		}
		plain, err := unseal([][]byte{key}, challenge, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeState(plain, "sealed", 100, time.Hour); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("pull across encryption modes fails clearly", func(t *testing.T) {
		ctx := context.Background()
		if _, err := plainNode.fetchState(ctx, url(sealedNode), "sealed"); err == nil || !strings.Contains(err.Error(), challengeHeader) {
			t.Fatalf("plain node pulling sealed state: %v", err)
		}
		if _, err := sealedNode.fetchState(ctx, url(plainNode), plainNode.id); err == nil || !strings.Contains(err.Error(), "plaintext") {
			t.Fatalf("sealed node pulling plaintext state: %v", err)
		}
		if _, err := sealedNode.fetchState(ctx, url(sealedNode), "someone-else"); err == nil || !strings.Contains(err.Error(), "expected") {
			t.Fatalf("state from the wrong node: %v", err)
		}
	})
}

func TestKeyringFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := bytes.Repeat([]byte{9}, 16)
	path := filepath.Join(dir, "keyring.json")
	kr, err := loadKeyring(Config{EncryptKey: k, KeyringFile: path})
	if err != nil || kr == nil {
		t.Fatalf("create: %v", err)
	}
	// The file exists now and wins over EncryptKey.
	kr, err = loadKeyring(Config{EncryptKey: bytes.Repeat([]byte{8}, 16), KeyringFile: path})
	if err != nil || !bytes.Equal(kr.GetPrimaryKey(), k) {
		t.Fatalf("reload: %v", err)
	}
	tests := []struct {
		name, content string
	}{
		{"not json", "nope"},
		{"empty", "[]"},
		{"bad base64", `["!!"]`},
		{"bad length", `["` + base64.StdEncoding.EncodeToString([]byte("short")) + `"]`},
	}
	for _, tc := range tests {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadKeyring(Config{KeyringFile: p}); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := loadKeyring(Config{KeyringFile: filepath.Join(dir, "missing")}); err == nil {
		t.Error("missing keyring file without EncryptKey accepted")
	}
	if kr, err := loadKeyring(Config{}); kr != nil || err != nil {
		t.Errorf("no encryption: %v, %v", kr, err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no node id", func(c *Config) { c.NodeID = "" }, "node id is empty"},
		{"bad bind", func(c *Config) { c.BindAddr = "nowhere" }, "bind address"},
		{"bad advertise", func(c *Config) { c.AdvertiseAddr = "1.2.3.4:99999" }, "advertise address"},
		{"short key", func(c *Config) { c.EncryptKey = []byte("short") }, "16, 24 or 32"},
		{"event too big", func(c *Config) { c.MaxEventBytes = 4096 }, "max event bytes"},
		{"probe timeout", func(c *Config) { c.Timings.ProbeTimeout = 2 * c.Timings.ProbeInterval }, "probe timeout"},
		{"too many addresses", func(c *Config) { c.MaxAddresses = 40 }, "max addresses"},
	}
	for _, tc := range tests {
		cfg := testConfig(0)
		cfg.APIAddr = "127.0.0.1:1"
		tc.mutate(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	cfg := testConfig(0)
	cfg.APIAddr = ""
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "api address") {
		t.Errorf("no API address: %v", err)
	}
}
