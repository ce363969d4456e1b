package kvwire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
	"time"
)

// Authentication extension: the client proves it knows the cluster secret with an HMAC-SHA256 over a canonical
// encoding of the request (not its MessagePack bytes, so key order and integer widths do not matter), a
// timestamp and a nonce. The server rejects a proof that is wrong, older or newer than its window, or whose nonce
// it has seen within the window. Only the client is authenticated; the stream back is not (see doc.go).

const (
	// MinNonceLen and MaxNonceLen bound an auth nonce's length.
	MinNonceLen = 16
	MaxNonceLen = 64
	// DefaultAuthWindow is how far a request's timestamp may be from the server's clock.
	DefaultAuthWindow = 30 * time.Second

	authDomain = "duet-kvwire-auth-v1\x00"
)

// SignRequest sets r.Auth to a proof of secret for r's current fields, with timestamp now and a fresh random
// nonce. Sign after every other field is final: changing one afterwards invalidates the proof.
func SignRequest(r *Request, secret []byte, now time.Time) error {
	if len(secret) == 0 {
		return errors.New("kvwire: empty auth secret")
	}
	nonce := make([]byte, MinNonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	ts := now.UnixMilli()
	r.Auth = &Auth{Timestamp: ts, Nonce: nonce, MAC: RequestMAC(secret, r, ts, nonce)}
	return nil
}

// RequestMAC is the HMAC-SHA256, keyed by secret, of this canonical byte string (integers big-endian):
//
//	"duet-kvwire-auth-v1" 0x00
//	ts (int64) | len(nonce) (uint32) nonce
//	len(request_id) (uint32) request_id | len(model_id) (uint32) model_id
//	start_pos (int64) | len(checksum) (uint32) checksum    (the requested checksum's wire string, "" if none)
//	len(token_ids) (uint32) | each token id (uint32)
func RequestMAC(secret []byte, r *Request, ts int64, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	var buf [4096]byte
	b := append(buf[:0], authDomain...)
	b = binary.BigEndian.AppendUint64(b, uint64(ts))
	m.Write(appendLenPrefixed(b, nonce))
	m.Write(appendLenPrefixed(buf[:0], []byte(r.RequestID)))
	m.Write(appendLenPrefixed(buf[:0], []byte(r.ModelID)))
	b = binary.BigEndian.AppendUint64(buf[:0], uint64(r.StartPos))
	b = appendLenPrefixed(b, []byte(r.Checksum.String()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.TokenIDs)))
	writeTokens(m, b, r.TokenIDs)
	return m.Sum(nil)
}

func appendLenPrefixed(b, p []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(p))), p...)
}

// writeTokens writes the pending bytes in b, then the tokens, through b's backing array in batches.
func writeTokens(h hash.Hash, b []byte, tokens []int32) {
	for _, t := range tokens {
		if len(b)+4 > cap(b) {
			h.Write(b)
			b = b[:0]
		}
		b = binary.BigEndian.AppendUint32(b, uint32(t))
	}
	h.Write(b)
}

// authVerifier checks proofs against a set of secrets (the first is current; the others are accepted during
// rotation) and remembers the nonces it accepted until their timestamps leave the window.
type authVerifier struct {
	secrets    [][]byte
	window     time.Duration
	maxEntries int

	mu        sync.Mutex
	seen      map[string]int64 // nonce -> Unix ms after which its timestamp is stale anyway
	lastPrune int64
}

func newAuthVerifier(secrets [][]byte, window time.Duration, maxEntries int) *authVerifier {
	return &authVerifier{secrets: secrets, window: window, maxEntries: maxEntries, seen: make(map[string]int64)}
}

// verify returns 0 when the proof is good and fresh (and records its nonce), or an error code and message.
func (v *authVerifier) verify(r *Request, now time.Time) (code int, msg string) {
	a := r.Auth
	if a == nil {
		return CodeUnauthorized, "authentication required: sign the request with the cluster secret"
	}
	if len(a.Nonce) < MinNonceLen || len(a.Nonce) > MaxNonceLen || len(a.MAC) != sha256.Size {
		return CodeUnauthorized, "authentication failed: malformed proof"
	}
	ok := false
	for _, s := range v.secrets {
		if hmac.Equal(a.MAC, RequestMAC(s, r, a.Timestamp, a.Nonce)) {
			ok = true
			break
		}
	}
	if !ok {
		return CodeUnauthorized, "authentication failed: wrong MAC"
	}
	nowMs, win := now.UnixMilli(), v.window.Milliseconds()
	if a.Timestamp < nowMs-win || a.Timestamp > nowMs+win {
		return CodeUnauthorized, "authentication failed: timestamp outside the accepted window (check clocks)"
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.seen) >= v.maxEntries || nowMs-v.lastPrune >= 1000 {
		for n, exp := range v.seen {
			if exp < nowMs {
				delete(v.seen, n)
			}
		}
		v.lastPrune = nowMs
	}
	if _, dup := v.seen[string(a.Nonce)]; dup {
		return CodeUnauthorized, "authentication failed: nonce already used (replay)"
	}
	if len(v.seen) >= v.maxEntries {
		return CodeBusy, "too many authenticated requests in the replay window"
	}
	v.seen[string(a.Nonce)] = a.Timestamp + win
	return 0, ""
}
