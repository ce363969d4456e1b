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

// Proof is what HeaderAuth says: "v1 <unix ms> <base64 HMAC>".
func Proof(key []byte, method, path, requestID, route string, body []byte, now time.Time) string {
	ts := now.UnixMilli()
	return "v1 " + strconv.FormatInt(ts, 10) + " " + base64.RawStdEncoding.EncodeToString(mac(key, method, path, requestID, route, body, ts))
}

func mac(key []byte, method, path, requestID, route string, body []byte, ts int64) []byte {
	h := hmac.New(sha256.New, key)
	bodySum := sha256.Sum256(body)
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

// Verify checks a proof. The error says why, for the log; the client only hears 401.
func (v *Verifier) Verify(proof, method, path, requestID, route string, body []byte) error {
	parts := strings.Fields(proof)
	if len(parts) != 3 || parts[0] != "v1" {
		return fmt.Errorf("%w: malformed", ErrBadProof)
	}
	ts, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad timestamp", ErrBadProof)
	}
	got, err := base64.RawStdEncoding.DecodeString(parts[2])
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: bad MAC encoding", ErrBadProof)
	}
	now := v.now().UnixMilli()
	if d := now - ts; d > AuthWindow.Milliseconds() || -d > AuthWindow.Milliseconds() {
		return fmt.Errorf("%w: timestamp %d ms away from this node's clock", ErrBadProof, d)
	}
	ok := false
	for _, k := range v.keys {
		if hmac.Equal(got, mac(k, method, path, requestID, route, body, ts)) {
			ok = true
			break
		}
	}
	if !ok {
		return fmt.Errorf("%w: the MAC does not match (another cluster secret?)", ErrBadProof)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	key := string(got)
	if _, dup := v.seen[key]; dup {
		return fmt.Errorf("%w: replayed", ErrBadProof)
	}
	if len(v.seen) >= maxSeen {
		for k, exp := range v.seen {
			if exp < now {
				delete(v.seen, k)
			}
		}
		if len(v.seen) >= maxSeen {
			return fmt.Errorf("%w: too many hops in the replay window", ErrBadProof)
		}
	}
	v.seen[key] = ts + AuthWindow.Milliseconds()
	return nil
}
