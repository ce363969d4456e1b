package view

import (
	"sync"
	"sync/atomic"

	"github.com/duet-ai/duet/plugins/router-disagg/affinity"
	"github.com/duet-ai/duet/sdk/router"
)

// Instance is a snapshot instance with what the view resolved about it. The embedded *router.Instance points
// into the snapshot and must not be modified.
type Instance struct {
	*router.Instance
	// Index is the instance's position among the view's instances (first occurrence of each id).
	Index int32
	// NodeInfo is the instance's node, nil when the snapshot does not have it.
	NodeInfo *router.Node
	// Alive is true when the instance's node is in the snapshot and alive.
	Alive bool
	// PrefillOnly is true when the instance links name the instance only on their prefill side, which makes it
	// a prefill-only instance whatever its role says.
	PrefillOnly bool
	// AffinityID is the instance's id in the prefix-affinity index.
	AffinityID affinity.ID
	// KVValid is true when KVEndpoint is host:port with a port in 1..65535; KVUnspecified when its host is
	// unspecified (empty, 0.0.0.0 or ::) and so needs another address to be dialled from elsewhere.
	KVValid, KVUnspecified bool
	// ReadyPartner is true when the instance links give the instance a prefill instance that is ready on an
	// alive node: a decode instance set up for disaggregated prefill.
	ReadyPartner bool

	node int32 // index of NodeInfo, -1 when unknown
}

// View is an indexed, read-only snapshot.
type View struct {
	Snapshot *router.Snapshot

	nodes     map[string]int32 // node index by id (first occurrence)
	nodeList  []*router.Node
	dense     []*router.Path          // by from*len(nodeList)+to node indexes, for up to denseNodes nodes
	paths     map[uint64]*router.Path // by from<<32 | to node indexes, for larger clusters
	instances []Instance
	byID      map[string]*Instance
	models    map[string]*model
	linked    map[uint64]bool // (decode << 32 | prefill) instance indexes of the instance links
	hasLinked []bool          // by instance index: the instance links give it prefill instances
	linkedTo  [][]*Instance   // by decode instance index: its linked prefill instances in the snapshot

	memo sync.Map // what plugins computed once for the view: see Memoized
}

// model is what the view knows of one model's instances.
type model struct {
	all      []*Instance
	decoders []*Instance // CanDecode and not prefill-only
	prefills []*Instance // CanPrefill
	minCtx   int         // the smallest positive ContextLength, 0 when none is known
	partner  bool        // some instance has ReadyPartner
	fp       string      // the fingerprint all of them have, when they have one (oneFP)
	oneFP    bool
}

// CanDecode reports whether an instance role can decode: both or decode (an empty role counts as both).
func CanDecode(role string) bool {
	return role == router.RoleBoth || role == router.RoleDecode || role == ""
}

// CanPrefill reports whether an instance role can serve prefill: both or prefill (an empty role counts as both).
func CanPrefill(role string) bool {
	return role == router.RoleBoth || role == router.RolePrefill || role == ""
}

// ExactKV reports whether two instances exchange KV cache bit for bit: their fingerprints are equal and not
// empty.
func ExactKV(a, b *Instance) bool { return a.Fingerprint != "" && a.Fingerprint == b.Fingerprint }

// ApproximateKV reports whether two instances exchange KV cache only approximately: other fingerprints (or
// none), but the same non-empty KV compatibility family, such as one model at two quantizations.
func ApproximateKV(a, b *Instance) bool {
	return !ExactKV(a, b) && a.KVCompat != "" && a.KVCompat == b.KVCompat
}

// New indexes s. When ids repeat, the first wins, as in the snapshot's own lookups.
func New(s *router.Snapshot) *View {
	v := &View{
		Snapshot: s,
		nodes:    make(map[string]int32, len(s.Nodes)),
		byID:     make(map[string]*Instance, len(s.Instances)),
		models:   map[string]*model{},
	}
	for i := range s.Nodes {
		if _, dup := v.nodes[s.Nodes[i].ID]; !dup {
			v.nodes[s.Nodes[i].ID] = int32(len(v.nodeList))
			v.nodeList = append(v.nodeList, &s.Nodes[i])
		}
	}
	n := len(v.nodeList)
	if n <= denseNodes {
		v.dense = make([]*router.Path, n*n)
	} else {
		v.paths = make(map[uint64]*router.Path, len(s.Paths))
	}
	lastFrom, from := "", int32(-1) // paths come grouped by their from node: look it up once per group
	for i := range s.Paths {
		p := &s.Paths[i]
		if p.From != lastFrom || from < 0 {
			lastFrom = p.From
			if f, ok := v.nodes[p.From]; ok {
				from = f
			} else {
				from = -1
			}
		}
		to, ok := v.nodes[p.To]
		if from < 0 || !ok {
			continue // a path to or from a node the snapshot does not have leads nowhere routable
		}
		if v.dense != nil {
			if k := int(from)*n + int(to); v.dense[k] == nil {
				v.dense[k] = p
			}
		} else if k := key(from, to); v.paths[k] == nil {
			v.paths[k] = p
		}
	}
	v.instances = make([]Instance, 0, len(s.Instances))
	for i := range s.Instances {
		in := &s.Instances[i]
		if _, dup := v.byID[in.ID]; dup {
			continue
		}
		e := Instance{Instance: in, Index: int32(len(v.instances)), AffinityID: affinity.IDOf(in.ID), node: -1}
		if n, ok := v.nodes[in.Node]; ok {
			e.node, e.NodeInfo = n, v.nodeList[n]
			e.Alive = e.NodeInfo.Status == router.NodeAlive
		}
		e.KVValid, e.KVUnspecified = parseKV(in.KVEndpoint)
		v.instances = append(v.instances, e)
		v.byID[in.ID] = nil // reserved; pointers are taken once the slice stops growing
	}
	for i := range v.instances {
		e := &v.instances[i]
		v.byID[e.ID] = e
		m := v.models[e.Model]
		if m == nil {
			m = &model{fp: e.Fingerprint, oneFP: e.Fingerprint != ""}
			v.models[e.Model] = m
		}
		m.all = append(m.all, e)
		m.oneFP = m.oneFP && e.Fingerprint == m.fp
		if e.ContextLength > 0 && (m.minCtx == 0 || e.ContextLength < m.minCtx) {
			m.minCtx = e.ContextLength
		}
	}
	if len(s.InstanceLinks) > 0 {
		onDecode, onPrefill := map[string]bool{}, map[string]bool{}
		v.linked = map[uint64]bool{}
		v.hasLinked = make([]bool, len(v.instances))
		for _, l := range s.InstanceLinks {
			for _, d := range l.DecodeInstances {
				onDecode[d] = true
			}
			for _, p := range l.PrefillInstances {
				onPrefill[p] = true
			}
			for _, d := range l.DecodeInstances {
				di, ok := v.byID[d]
				if !ok {
					continue
				}
				// An instance link naming prefill instances restricts the decode instance to them, even to ones
				// that are not in the snapshot (yet): the operator said who serves whom.
				v.hasLinked[di.Index] = v.hasLinked[di.Index] || len(l.PrefillInstances) > 0
				for _, p := range l.PrefillInstances {
					if pi, ok := v.byID[p]; ok && !v.linked[key(di.Index, pi.Index)] {
						v.linked[key(di.Index, pi.Index)] = true
						if v.linkedTo == nil {
							v.linkedTo = make([][]*Instance, len(v.instances))
						}
						v.linkedTo[di.Index] = append(v.linkedTo[di.Index], pi)
					}
				}
			}
		}
		for i := range v.instances {
			e := &v.instances[i]
			e.PrefillOnly = onPrefill[e.ID] && !onDecode[e.ID]
			for _, p := range v.LinkedPrefill(e) {
				e.ReadyPartner = e.ReadyPartner || p.Status == router.InstanceReady && p.Alive
			}
			if e.ReadyPartner {
				v.models[e.Model].partner = true
			}
		}
	}
	v.sides() // once PrefillOnly is known
	return v
}

// sides sorts each model's instances into those that can decode and those that can prefill.
func (v *View) sides() {
	for i := range v.instances {
		e := &v.instances[i]
		m := v.models[e.Model]
		if CanDecode(e.Role) && !e.PrefillOnly {
			m.decoders = append(m.decoders, e)
		}
		if CanPrefill(e.Role) {
			m.prefills = append(m.prefills, e)
		}
	}
}

// denseNodes is the largest cluster whose paths are indexed in an n×n table (512 KiB of pointers at most);
// larger ones use a map.
const denseNodes = 256

// path returns the path between two node indexes.
func (v *View) path(from, to int32) (*router.Path, bool) {
	var p *router.Path
	if v.dense != nil {
		p = v.dense[int(from)*len(v.nodeList)+int(to)]
	} else {
		p = v.paths[key(from, to)]
	}
	return p, p != nil
}

func key(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// parseKV checks a KV endpoint once per snapshot, so that filters need not parse it per request.
func parseKV(kv string) (valid, unspecified bool) {
	host, _, err := splitKV(kv)
	return err == nil, err == nil && unspecifiedHost(host)
}

// NodeIndex returns the position of the node with the given id among the view's nodes: instances on it have
// that Instance.NodeIndex, which saves comparing node ids per candidate.
func (v *View) NodeIndex(id string) (int32, bool) {
	n, ok := v.nodes[id]
	return n, ok
}

// NodeIndex is the position of the instance's node among the view's nodes (View.NodeIndex), -1 when the
// snapshot does not have the node.
func (in *Instance) NodeIndex() int32 { return in.node }

// Node returns the node with the given id.
func (v *View) Node(id string) (*router.Node, bool) {
	if n, ok := v.nodes[id]; ok {
		return v.nodeList[n], true
	}
	return nil, false
}

// NodeAlive reports whether the node is in the snapshot and alive.
func (v *View) NodeAlive(id string) bool {
	n, ok := v.Node(id)
	return ok && n.Status == router.NodeAlive
}

// Path returns the path from one node to another.
func (v *View) Path(from, to string) (*router.Path, bool) {
	f, ok1 := v.nodes[from]
	t, ok2 := v.nodes[to]
	if !ok1 || !ok2 {
		return nil, false
	}
	return v.path(f, t)
}

// PathBetween returns the path from one instance's node to another's, without string lookups.
func (v *View) PathBetween(from, to *Instance) (*router.Path, bool) {
	if from.node < 0 || to.node < 0 {
		return nil, false
	}
	return v.path(from.node, to.node)
}

// Instance returns the instance with the given id.
func (v *View) Instance(id string) (*Instance, bool) {
	in, ok := v.byID[id]
	return in, ok
}

// All returns every instance of the view, in snapshot order, in a new slice.
func (v *View) All() []*Instance {
	out := make([]*Instance, len(v.instances))
	for i := range v.instances {
		out[i] = &v.instances[i]
	}
	return out
}

// Instances returns the instances of a model, in snapshot order. The slice belongs to the view: do not modify it.
func (v *View) Instances(model string) []*Instance {
	if m := v.models[model]; m != nil {
		return m.all
	}
	return nil
}

// Decoders returns the instances of a model that can decode by role and are not prefill-only, in snapshot
// order: the decode profile's candidates before the filters that depend on status and the request. The slice
// belongs to the view.
func (v *View) Decoders(model string) []*Instance {
	if m := v.models[model]; m != nil {
		return m.decoders
	}
	return nil
}

// Prefillers returns the instances of a model that can prefill by role, in snapshot order. The slice belongs
// to the view.
func (v *View) Prefillers(model string) []*Instance {
	if m := v.models[model]; m != nil {
		return m.prefills
	}
	return nil
}

// SoleFingerprint returns the fingerprint every instance of the model has, if they all have the same one and
// it is not empty: KV is then exact between any two of them.
func (v *View) SoleFingerprint(model string) (string, bool) {
	if m := v.models[model]; m != nil && m.oneFP {
		return m.fp, true
	}
	return "", false
}

// HasReadyPartners reports whether some instance of the model has ReadyPartner.
func (v *View) HasReadyPartners(model string) bool {
	m := v.models[model]
	return m != nil && m.partner
}

// ShortestContext returns the smallest positive ContextLength among the instances of a model, 0 when none of
// them has one: a request that fits it fits every instance of the model whose context length is known, so
// the context filters can skip it.
func (v *View) ShortestContext(model string) int {
	if m := v.models[model]; m != nil {
		return m.minCtx
	}
	return 0
}

// LinkedPrefill returns the prefill instances the instance links give the decode instance and that the
// snapshot has, each once. The slice belongs to the view.
func (v *View) LinkedPrefill(decode *Instance) []*Instance {
	if v.linkedTo == nil {
		return nil
	}
	return v.linkedTo[decode.Index]
}

// HasLinkedPrefill reports whether the instance links give the decode instance at least one prefill instance.
func (v *View) HasLinkedPrefill(decode *Instance) bool {
	return v.hasLinked != nil && v.hasLinked[decode.Index]
}

// Linked reports whether an instance link pairs the decode instance with the prefill instance.
func (v *View) Linked(decode, prefill *Instance) bool {
	return v.linked[key(decode.Index, prefill.Index)]
}

// Memoized returns the value a plugin memoized in the view under key (see Memoize).
func (v *View) Memoized(key any) (any, bool) {
	if e, ok := v.memo.Load(key); ok {
		e := e.(*memoEntry)
		if e.done.Load() {
			return e.val, true
		}
	}
	return nil, false
}

// Memoize returns the value memoized under key, calling build to make it the first time. Concurrent first
// calls for one key wait for a single build. A view is immutable, so a value computed from the view alone
// holds for as long as the view does; the view keeps every value until it is dropped, so keys must come from
// a bounded set (a plugin and one of the view's candidate lists, say) and be comparable. Look the key up with
// Memoized first: a call to Memoize allocates.
func (v *View) Memoize(key any, build func() any) any {
	e, _ := v.memo.LoadOrStore(key, new(memoEntry))
	m := e.(*memoEntry)
	m.once.Do(func() {
		m.val = build()
		m.done.Store(true)
	})
	return m.val
}

// memoEntry is one memoized value: built once, then read without locks.
type memoEntry struct {
	once sync.Once
	done atomic.Bool
	val  any
}

// Cache keeps the views of the last few snapshots it was asked about. It is safe for concurrent use.
type Cache struct {
	last atomic.Pointer[View]

	mu   sync.Mutex
	ring [cacheSize]*View
	next int
}

// cacheSize covers requests that still route against the previous snapshots while a new one comes in.
const cacheSize = 4

// Get returns the view of s, building it if none of the cached views is of s. Views are matched by pointer:
// a snapshot is immutable, and a cached view keeps its snapshot alive, so the pointer cannot be reused.
func (c *Cache) Get(s *router.Snapshot) *View {
	if v := c.last.Load(); v != nil && v.Snapshot == s {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.ring {
		if v != nil && v.Snapshot == s {
			c.last.Store(v)
			return v
		}
	}
	v := New(s)
	c.ring[c.next] = v
	c.next = (c.next + 1) % cacheSize
	c.last.Store(v)
	return v
}
