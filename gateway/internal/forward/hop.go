package forward

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header names of a hop.
const (
	HeaderHop   = "X-Duet-Hop"
	HeaderRoute = "X-Duet-Route"
	HeaderAuth  = "X-Duet-Hop-Auth"
	// HeaderKeepalive asks the owner for a sign of life at least every so many milliseconds until its answer
	// is complete: an informational 102 before the response's headers, and a stream's heartbeat after them.
	HeaderKeepalive = "X-Duet-Hop-Keepalive"
)

// MaxHops is how many hops a request may take: one, from the entry to the owner.
const MaxHops = 1

// AuthWindow is how far a hop proof's timestamp may be from the owner's clock.
const AuthWindow = time.Minute

// Route is the decision the entry gateway pins on a hop.
type Route struct {
	EntryNode      string     `json:"entry_node"`
	DecodeNode     string     `json:"decode_node"`
	DecodeInstance string     `json:"decode_instance"`
	Prefill        []Endpoint `json:"prefill,omitempty"`
	// Attempt counts the owners tried (2 on the retry after a first owner failed).
	Attempt int `json:"attempt,omitempty"`
	// Reason is the router's account of the decision (router.Decision.Reason), so the owner's answer carries
	// it in timings.route.
	Reason string `json:"reason,omitempty"`
	// EstimateFirstToken and EstimateTotal are the router's estimate of the request's time to first token and
	// total time, in seconds (PD auto's, zero when the router made none): the owner, which runs the request,
	// compares them with its timings.
	EstimateFirstToken float64 `json:"estimate_first_token_s,omitempty"`
	EstimateTotal      float64 `json:"estimate_total_s,omitempty"`
}

// MaxReason bounds the reason a route carries; a longer one is cut.
const MaxReason = 512

// Endpoint is one prefill endpoint of a pinned decision.
type Endpoint struct {
	InstanceID  string `json:"instance_id"`
	Node        string `json:"node"`
	Address     string `json:"address"`
	Approximate bool   `json:"approximate,omitempty"`
}

// maxRouteHeader bounds the route header (16 prefill endpoints fit many times).
const maxRouteHeader = 8 << 10

// Encode is the route's header value.
func (r Route) Encode() string {
	b, _ := json.Marshal(r)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeRoute reads a route header.
func DecodeRoute(s string) (Route, error) {
	var r Route
	if len(s) > maxRouteHeader {
		return r, fmt.Errorf("%s is %d bytes, over %d", HeaderRoute, len(s), maxRouteHeader)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return r, fmt.Errorf("%s is not base64url: %v", HeaderRoute, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %v", HeaderRoute, err)
	}
	if r.EstimateFirstToken < 0 || r.EstimateTotal < 0 {
		return r, fmt.Errorf("%s: a negative estimate (first token %g s, total %g s)", HeaderRoute, r.EstimateFirstToken, r.EstimateTotal)
	}
	if len(r.Reason) > MaxReason {
		return r, fmt.Errorf("%s: the reason is %d bytes, over %d", HeaderRoute, len(r.Reason), MaxReason)
	}
	return r, nil
}

// Proof is what HeaderAuth says: "v2 <unix ms> <base64 SHA-256 of the body> <base64 HMAC>". The body's hash
// travels in the clear so that the owner checks the HMAC before it reads the body: a forged hop is refused
// before it holds any of the body budget, and the body read afterwards must hash to what the proof says.
func Proof(key []byte, method, path, requestID, route string, body []byte, now time.Time) string {
	ts := now.UnixMilli()
	sum := sha256.Sum256(body)
	return "v2 " + strconv.FormatInt(ts, 10) + " " + base64.RawStdEncoding.EncodeToString(sum[:]) + " " +
		base64.RawStdEncoding.EncodeToString(mac(key, method, path, requestID, route, sum, ts))
}

func mac(key []byte, method, path, requestID, route string, bodySum [sha256.Size]byte, ts int64) []byte {
	h := hmac.New(sha256.New, key)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(ts))
	for _, part := range [][]byte{[]byte("duet-hop-v1"), []byte(method), []byte(path), []byte(requestID), n[:], bodySum[:], []byte(route)} {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(part)))
		h.Write(l[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// Verifier checks hop proofs against the cluster's hop keys (current first; older ones during rotation) and
// remembers the proofs it accepted until they leave the window, so none is accepted twice.
type Verifier struct {
	keys [][]byte
	now  func() time.Time

	mu   sync.Mutex
	seen map[string]int64 // proof MAC -> expiry (unix ms)
}

// maxSeen bounds the replay cache; when it is full of live entries, hops are refused until entries expire.
const maxSeen = 1 << 16

// NewVerifier returns a verifier for keys.
func NewVerifier(keys [][]byte) *Verifier {
	return &Verifier{keys: keys, now: time.Now, seen: map[string]int64{}}
}

// ErrBadProof is the error of a hop that fails authentication.
var ErrBadProof = errors.New("the hop's credential is missing, wrong, stale or replayed")

// Verify checks a proof against a body at hand (VerifyHead, then CheckBody).
func (v *Verifier) Verify(proof, method, path, requestID, route string, body []byte) error {
	sum, err := v.VerifyHead(proof, method, path, requestID, route)
	if err != nil {
		return err
	}
	return CheckBody(sum, body)
}

// CheckBody checks that a body read after VerifyHead is the one the proof covers.
func CheckBody(sum [sha256.Size]byte, body []byte) error {
	if got := sha256.Sum256(body); !hmac.Equal(got[:], sum[:]) {
		return fmt.Errorf("%w: the body is not the one the proof covers", ErrBadProof)
	}
	return nil
}

// VerifyHead checks a proof's headers before the body is read and returns the body's SHA-256 the proof
// vouches for (CheckBody compares it with the body). The error says why, for the log; the client only hears
// 401. A proof is accepted once: a replay is refused here too, before its body.
func (v *Verifier) VerifyHead(proof, method, path, requestID, route string) (sum [sha256.Size]byte, err error) {
	parts := strings.Fields(proof)
	if len(parts) != 4 || parts[0] != "v2" {
		return sum, fmt.Errorf("%w: malformed (want v2 <ms> <body sha256> <mac>)", ErrBadProof)
	}
	ts, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return sum, fmt.Errorf("%w: bad timestamp", ErrBadProof)
	}
	claimed, err := base64.RawStdEncoding.DecodeString(parts[2])
	if err != nil || len(claimed) != sha256.Size {
		return sum, fmt.Errorf("%w: bad body hash encoding", ErrBadProof)
	}
	copy(sum[:], claimed)
	got, err := base64.RawStdEncoding.DecodeString(parts[3])
	if err != nil || len(got) != sha256.Size {
		return sum, fmt.Errorf("%w: bad MAC encoding", ErrBadProof)
	}
	now := v.now().UnixMilli()
	if d := now - ts; d > AuthWindow.Milliseconds() || -d > AuthWindow.Milliseconds() {
		return sum, fmt.Errorf("%w: timestamp %d ms away from this node's clock", ErrBadProof, d)
	}
	ok := false
	for _, k := range v.keys {
		if hmac.Equal(got, mac(k, method, path, requestID, route, sum, ts)) {
			ok = true
			break
		}
	}
	if !ok {
		return sum, fmt.Errorf("%w: the MAC does not match (another cluster secret?)", ErrBadProof)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	key := string(got)
	if _, dup := v.seen[key]; dup {
		return sum, fmt.Errorf("%w: replayed", ErrBadProof)
	}
	if len(v.seen) >= maxSeen {
		for k, exp := range v.seen {
			if exp < now {
				delete(v.seen, k)
			}
		}
		if len(v.seen) >= maxSeen {
			return sum, fmt.Errorf("%w: too many hops in the replay window", ErrBadProof)
		}
	}
	v.seen[key] = ts + AuthWindow.Milliseconds()
	return sum, nil
}
