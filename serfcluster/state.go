package serfcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// StateHandler serves this node's full table state to peers pulling it for anti-entropy. The gateway
// mounts it at StatePath (GET only). In an encrypted cluster the body is sealed with the gossip key and
// bound to the caller's challenge, so it reveals nothing to, and cannot be forged by, anyone without the
// key; without encryption it is plain JSON and the gateway should restrict who may reach it.
func (c *Cluster) StateHandler() http.Handler {
	return http.HandlerFunc(c.serveState)
}

func (c *Cluster) serveState(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "serfcluster: state: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var challenge []byte
	if c.keyring != nil {
		ch, err := hex.DecodeString(r.Header.Get(challengeHeader))
		if err != nil || len(ch) != challengeLen {
			http.Error(w, fmt.Sprintf("serfcluster: state: the %s header must hold %d hex-encoded bytes", challengeHeader, challengeLen), http.StatusBadRequest)
			return
		}
		challenge = ch
	}
	body, err := c.stateBody(time.Now())
	if err != nil {
		c.log.Error("cannot serve state", "err", err)
		http.Error(w, "serfcluster: state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	ctype := "application/json"
	if c.keyring != nil {
		if body, err = seal(c.keyring.GetPrimaryKey(), challenge, body); err != nil {
			http.Error(w, "serfcluster: state: "+err.Error(), http.StatusInternalServerError)
			return
		}
		ctype = sealedType
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// stateBody encodes the state the latest snapshot prepared, with tombstone TTLs counted down to now.
func (c *Cluster) stateBody(now time.Time) ([]byte, error) {
	s := c.snap.Load()
	ex := s.export
	elapsed := now.Sub(ex.built).Milliseconds()
	doc := stateDoc{
		V: wireVersion, Node: string(c.id), Clock: uint64(c.clock.Time()), Digest: s.Digest,
		Entries: make([]wireEntry, 0, len(ex.entries)), Loads: ex.loads,
	}
	for _, e := range ex.entries {
		if e.Deleted {
			if e.TTLms -= elapsed; e.TTLms <= 0 {
				continue
			}
		}
		doc.Entries = append(doc.Entries, e)
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > c.cfg.MaxStateBytes {
		return nil, fmt.Errorf("state is %d bytes, over MaxStateBytes (%d)", len(body), c.cfg.MaxStateBytes)
	}
	return body, nil
}

// pulledState is a peer's state document after validation.
type pulledState struct {
	clock   uint64
	entries []decodedEntry
	loads   []pulledLoad
}

type pulledLoad struct {
	id    string
	entry loadEntry
}

// fetchState pulls and validates peer's state from url. Everything about it is bounded: the time by ctx,
// the size by MaxStateBytes, the content by the same validation as local writes.
func (c *Cluster) fetchState(ctx context.Context, url string, peer NodeID) (*pulledState, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", url, err)
	}
	var challenge []byte
	if c.keyring != nil {
		challenge = make([]byte, challengeLen)
		_, _ = rand.Read(challenge)
		req.Header.Set(challengeHeader, hex.EncodeToString(challenge))
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", url, err)
	}
	defer resp.Body.Close()
	limit := c.cfg.MaxStateBytes + int64(sealOverhead)
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", url, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("pull %s: body exceeds %d bytes", url, limit)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pull %s: %s: %.200s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	sealed := resp.Header.Get("Content-Type") == sealedType
	switch {
	case c.keyring != nil && !sealed:
		return nil, fmt.Errorf("pull %s: peer served plaintext state but this cluster is encrypted", url)
	case c.keyring == nil && sealed:
		return nil, fmt.Errorf("pull %s: peer's state is sealed and this node has no keyring", url)
	case sealed:
		if body, err = unseal(c.keyring.GetKeys(), challenge, body); err != nil {
			return nil, fmt.Errorf("pull %s: %w", url, err)
		}
	}
	st, err := decodeState(body, peer, c.cfg.MaxTableEntries, c.cfg.TombstoneTTL)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", url, err)
	}
	return st, nil
}

// decodeState parses and validates a state document from peer. One bad entry rejects the whole document:
// a peer that sends one is broken or hostile, and nothing it sent can be trusted.
func decodeState(body []byte, peer NodeID, maxEntries int, maxTTL time.Duration) (*pulledState, error) {
	var doc stateDoc
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("state document: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("state document: trailing data")
	}
	switch {
	case doc.V != wireVersion:
		return nil, fmt.Errorf("state document: version %d, want %d", doc.V, wireVersion)
	case NodeID(doc.Node) != peer:
		return nil, fmt.Errorf("state document is from node %q, expected %q", doc.Node, peer)
	case len(doc.Entries) > 2*maxEntries || len(doc.Loads) > maxEntries:
		return nil, fmt.Errorf("state document: %d entries and %d loads, over the limits of %d and %d",
			len(doc.Entries), len(doc.Loads), 2*maxEntries, maxEntries)
	}
	st := &pulledState{clock: doc.Clock, entries: make([]decodedEntry, 0, len(doc.Entries))}
	for _, w := range doc.Entries {
		if w.Stub {
			return nil, fmt.Errorf("state document: entry %s/%q is a stub", w.Table, w.Key)
		}
		d, err := w.decode(maxTTL)
		if err != nil {
			return nil, fmt.Errorf("state document: %w", err)
		}
		st.entries = append(st.entries, d)
	}
	for _, w := range doc.Loads {
		if w.Origin == "" {
			return nil, fmt.Errorf("state document: load of %q without origin", w.ID)
		}
		id, le, err := w.decode("")
		if err != nil {
			return nil, fmt.Errorf("state document: %w", err)
		}
		st.loads = append(st.loads, pulledLoad{id: id, entry: le})
	}
	return st, nil
}
