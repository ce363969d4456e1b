package serfcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/serfcluster/internal/lww"
)

func instanceWire(node string) *wireInstance {
	return instanceToWire(testInstance(NodeID(node), "a"))
}

func TestWireEntryDecode(t *testing.T) {
	t.Parallel()
	good := func() wireEntry {
		return wireEntry{Table: tableInstances, Key: "n1/a", LTime: 5, Origin: "n1", Inst: instanceWire("n1")}
	}
	tests := []struct {
		name   string
		mutate func(*wireEntry)
		ok     bool
	}{
		{"instance", func(*wireEntry) {}, true},
		{"instance tombstone", func(w *wireEntry) { w.Inst, w.Deleted, w.TTLms = nil, true, 1000 }, true},
		{"stub", func(w *wireEntry) { w.Inst, w.Stub = nil, true }, true},
		{"link", func(w *wireEntry) {
			w.Table, w.Key, w.Inst = tableLinks, "l1", nil
			w.Link = &wireLink{ID: "l1", Prefill: []string{"p"}, Decode: []string{"d"}}
		}, true},
		{"zero ltime", func(w *wireEntry) { w.LTime = 0 }, false},
		{"bad key", func(w *wireEntry) { w.Key = "a b" }, false},
		{"bad origin", func(w *wireEntry) { w.Origin = "" }, false},
		{"key mismatch", func(w *wireEntry) { w.Key = "n1/b" }, false},
		{"foreign writer", func(w *wireEntry) { w.Origin = "n2" }, false},
		{"invalid instance", func(w *wireEntry) { w.Inst.Role = "chef" }, false},
		{"no value", func(w *wireEntry) { w.Inst = nil }, false},
		{"stub with value", func(w *wireEntry) { w.Stub = true }, false},
		{"delete with value", func(w *wireEntry) { w.Deleted, w.TTLms = true, 1000 }, false},
		{"delete without ttl", func(w *wireEntry) { w.Inst, w.Deleted = nil, true }, false},
		{"unknown table", func(w *wireEntry) { w.Table = "z" }, false},
		{"link value in instance table", func(w *wireEntry) {
			w.Inst, w.Link = nil, &wireLink{ID: "n1/a", Decode: []string{"d"}}
		}, false},
		{"link without decode side", func(w *wireEntry) {
			w.Table, w.Key, w.Inst = tableLinks, "l1", nil
			w.Link = &wireLink{ID: "l1", Prefill: []string{"p"}}
		}, false},
		{"link duplicate member", func(w *wireEntry) {
			w.Table, w.Key, w.Inst = tableLinks, "l1", nil
			w.Link = &wireLink{ID: "l1", Decode: []string{"d", "d"}}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := good()
			tc.mutate(&w)
			_, err := w.decode(time.Hour)
			if (err == nil) != tc.ok {
				t.Fatalf("decode: err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	w := wireEntry{Table: tableLinks, Key: "l", LTime: 1, Origin: "n", Deleted: true, TTLms: int64(48 * time.Hour / time.Millisecond)}
	d, err := w.decode(time.Hour)
	if err != nil || d.link.TTL != time.Hour {
		t.Fatalf("tombstone TTL not capped: %v, %v", d.link.TTL, err)
	}
}

func TestPack(t *testing.T) {
	t.Parallel()
	var entries []wireEntry
	for i := range 40 {
		entries = append(entries, instanceEntryToWire(lww.Entry[Instance]{
			Key: fmt.Sprintf("n1/i%d", i), Rev: lww.Rev{LTime: uint64(i + 1), Origin: "n1"},
			Value: func() Instance { in := testInstance("n1", fmt.Sprintf("i%d", i)); return in }(),
		}))
	}
	var big []string
	for i := range MaxLinkMembers {
		big = append(big, fmt.Sprintf("%s-%03d", strings.Repeat("x", 100), i))
	}
	entries = append(entries, linkEntryToWire(lww.Entry[InstanceLink]{
		Key: "big", Rev: lww.Rev{LTime: 99, Origin: "n1"}, Value: InstanceLink{LinkID: "big", DecodeInstances: big},
	}))
	const budget = 1024 - len(eventDelta) - eventOverhead
	payloads, dropped := pack("n1", "e", entries, budget, stubOf)
	if len(dropped) != 0 {
		t.Fatalf("dropped %d", len(dropped))
	}
	seen, stubs := 0, 0
	for _, p := range payloads {
		if len(p) > budget {
			t.Fatalf("payload of %d bytes over the budget of %d", len(p), budget)
		}
		var msg deltaMsg
		if err := json.Unmarshal(p, &msg); err != nil || msg.V != wireVersion || msg.Sender != "n1" {
			t.Fatalf("payload does not decode: %v %+v", err, msg)
		}
		for _, w := range msg.Entries {
			d, err := w.decode(time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			seen++
			if d.stub {
				stubs++
			}
		}
	}
	if seen != len(entries) || stubs != 1 {
		t.Fatalf("decoded %d entries with %d stubs; want %d with 1", seen, stubs, len(entries))
	}
	if len(payloads) > 1+len(entries)/2 {
		t.Errorf("%d payloads for %d entries: packing does not batch", len(payloads), len(entries))
	}
	// Items that do not fit even shrunk are reported, not sent.
	_, droppedLoads := pack("n1", "l", []wireLoad{{ID: strings.Repeat("i", 200)}}, 100, nil)
	if len(droppedLoads) != 1 {
		t.Fatal("an oversized load was not reported dropped")
	}
}

func validStateDoc() stateDoc {
	return stateDoc{
		V: wireVersion, Node: "n1", Clock: 10,
		Entries: []wireEntry{
			{Table: tableInstances, Key: "n1/a", LTime: 4, Origin: "n1", Inst: instanceWire("n1")},
			{Table: tableLinks, Key: "gone", LTime: 6, Origin: "n2", Deleted: true, TTLms: 5000},
		},
		Loads: []wireLoad{{ID: "n1/a", Origin: "n1", LTime: 7, InFlight: 3, AtMs: 1700000000000}},
	}
}

func TestDecodeState(t *testing.T) {
	t.Parallel()
	encode := func(d stateDoc) []byte {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		body func() []byte
		ok   bool
	}{
		{"valid", func() []byte { return encode(validStateDoc()) }, true},
		{"trailing data", func() []byte { return append(encode(validStateDoc()), []byte(" {}")...) }, false},
		{"not json", func() []byte { return []byte("<html>") }, false},
		{"wrong version", func() []byte { d := validStateDoc(); d.V = 2; return encode(d) }, false},
		{"wrong node", func() []byte { d := validStateDoc(); d.Node = "n9"; return encode(d) }, false},
		{"stub", func() []byte {
			d := validStateDoc()
			d.Entries[0] = wireEntry{Table: tableInstances, Key: "n1/a", LTime: 4, Origin: "n1", Stub: true}
			return encode(d)
		}, false},
		{"bad entry rejects all", func() []byte { d := validStateDoc(); d.Entries[0].Inst.Model = ""; return encode(d) }, false},
		{"load without origin", func() []byte { d := validStateDoc(); d.Loads[0].Origin = ""; return encode(d) }, false},
		{"negative load", func() []byte { d := validStateDoc(); d.Loads[0].InFlight = -3; return encode(d) }, false},
		{"too many entries", func() []byte {
			d := validStateDoc()
			for range 5 {
				d.Entries = append(d.Entries, d.Entries[0])
			}
			return encode(d)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := decodeState(tc.body(), "n1", 3, time.Hour)
			if (err == nil) != tc.ok {
				t.Fatalf("decodeState: err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (len(st.entries) != 2 || len(st.loads) != 1 || st.clock != 10) {
				t.Fatalf("decoded %+v", st)
			}
		})
	}
}

// TestStateDocGolden pins the wire format peers exchange: changing it breaks mixed-version clusters, so a
// change must be deliberate (bump wireVersion) and show up in review as a changed golden file. Regenerate
// with SERFCLUSTER_UPDATE_GOLDEN=1.
func TestStateDocGolden(t *testing.T) {
	t.Parallel()
	got, err := json.MarshalIndent(validStateDoc(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "state-v1.golden.json")
	if os.Getenv("SERFCLUSTER_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("state document changed:\n%s\nwant:\n%s", got, want)
	}
	if _, err := decodeState(want, "n1", 10, time.Hour); err != nil {
		t.Fatalf("golden document does not decode: %v", err)
	}
}

func TestSeal(t *testing.T) {
	t.Parallel()
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 16)
	challenge := []byte("0123456789abcdef")
	plain := []byte(`{"v":1}`)
	sealed, err := seal(k1, challenge, plain)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := unseal([][]byte{k2, k1}, challenge, sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("unseal = %q, %v", got, err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	tests := []struct {
		name      string
		keys      [][]byte
		challenge []byte
		body      []byte
	}{
		{"other challenge (replay)", [][]byte{k1}, []byte("fedcba9876543210"), sealed},
		{"key not in keyring", [][]byte{k2}, challenge, sealed},
		{"tampered", [][]byte{k1}, challenge, tampered},
		{"truncated", [][]byte{k1}, challenge, sealed[:sealOverhead-1]},
		{"not sealed", [][]byte{k1}, challenge, []byte(`{"v":1,"node":"n1","entries":[],"loads":[]}`)},
	}
	for _, tc := range tests {
		if _, err := unseal(tc.keys, tc.challenge, tc.body); err == nil {
			t.Errorf("%s: unseal succeeded", tc.name)
		}
	}
}

// FuzzDecodeState feeds arbitrary bodies to the state decoder: it must never panic, and whatever it accepts
// must pass the same validation as a local write.
func FuzzDecodeState(f *testing.F) {
	b, _ := json.Marshal(validStateDoc())
	f.Add(b)
	f.Add([]byte(`{"v":1,"node":"n1","entries":[{"tb":"l","k":"x","t":1,"o":"n1","l":{"id":"x","p":[],"d":["y"]}}],"loads":[]}`))
	f.Add([]byte(`{"v":1,"node":"n1","entries":null,"loads":[{"i":"a","o":"n1","t":18446744073709551615,"f":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		st, err := decodeState(body, "n1", 64, time.Hour)
		if err != nil {
			return
		}
		for _, d := range st.entries {
			if d.table == tableInstances && !d.inst.Deleted {
				if err := d.inst.Value.Validate(); err != nil || d.inst.Value.Node != NodeID(d.inst.Rev.Origin) {
					t.Fatalf("accepted an invalid instance: %v", err)
				}
			}
			if d.table == tableLinks && !d.link.Deleted {
				if err := d.link.Value.Validate(); err != nil {
					t.Fatalf("accepted an invalid link: %v", err)
				}
			}
			if d.rev().LTime == 0 || (d.inst.Deleted || d.link.Deleted) && max(d.inst.TTL, d.link.TTL) > time.Hour {
				t.Fatalf("accepted a bad revision or TTL: %+v", d)
			}
		}
	})
}

// FuzzDeltaEvent feeds arbitrary user-event payloads through the decoding the event loop does.
func FuzzDeltaEvent(f *testing.F) {
	payloads, _ := pack("n1", "e", validStateDoc().Entries, 1000, stubOf)
	for _, p := range payloads {
		f.Add(p)
	}
	f.Add([]byte(`{"v":1,"s":"n2","e":[{"tb":"i","k":"n1/a","t":3,"o":"n1","h":true}]}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var msg deltaMsg
		if json.Unmarshal(payload, &msg) != nil {
			return
		}
		for _, w := range msg.Entries {
			d, err := w.decode(time.Hour)
			if err != nil {
				continue
			}
			if d.stub && (d.inst.Value.ID != "" || d.link.Value.LinkID != "") {
				t.Fatal("a stub carried a value")
			}
		}
	})
}

// TestWireSpeed: a speed survives the wire to 4 significant digits (byte counts exactly), a node that sends no
// state bytes (one from before they existed) reads as sending 0, and one out of bounds makes its load bad input
// rather than a table entry.
func TestWireSpeed(t *testing.T) {
	sp := &Speed{PrefillTPS: []float64{1234.5678, 99}, DecodeTPS: 12.345678, QueueWait: 1500 * time.Microsecond,
		KVBytesPerToken: 4096, KVStateBytes: 77266944, Samples: 3, Ingress: []LinkSpeed{{From: "n2", BytesPerSecond: 123456789, RTT: time.Millisecond}}}
	w := loadToWire("n1/a", loadEntry{origin: "n1", ltime: 4, load: Load{InFlight: 1, UpdatedAt: time.UnixMilli(1), Speed: sp}}, true)
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var back wireLoad
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	_, le, err := back.decode("")
	if err != nil {
		t.Fatal(err)
	}
	got := le.load.Speed
	if got == nil || got.PrefillTPS[0] != 1235 || got.DecodeTPS != 12.35 || got.Ingress[0].BytesPerSecond != 1.235e8 ||
		got.QueueWait != 1500*time.Microsecond || got.KVBytesPerToken != 4096 || got.KVStateBytes != 77266944 || got.Ingress[0].RTT != time.Millisecond {
		t.Fatalf("speed after the wire: %+v (from %s)", got, b)
	}
	var old wireLoad
	if err := json.Unmarshal([]byte(`{"i":"n1/a","o":"n1","t":4,"s":{"d":12.35,"k":4096,"n":3}}`), &old); err != nil {
		t.Fatal(err)
	}
	if _, le, err := old.decode(""); err != nil || le.load.Speed == nil || le.load.Speed.KVBytesPerToken != 4096 || le.load.Speed.KVStateBytes != 0 {
		t.Fatalf("an older node's speed: %+v, %v", le.load.Speed, err)
	}
	for name, s := range map[string]string{
		"negative rate":  `{"d":-1}`,
		"too many bands": `{"p":[1,2,3,4,5,6,7,8,9]}`,
		"bad link node":  `{"l":[{"f":"","b":1}]}`,
		"negative queue": `{"q":-5}`,
		"negative state": `{"s":-1}`,
	} {
		var ws wireSpeed
		if err := json.Unmarshal([]byte(s), &ws); err != nil {
			t.Fatal(err)
		}
		bad := wireLoad{ID: "n1/a", Origin: "n1", LTime: 1, S: &ws}
		if _, _, err := bad.decode(""); err == nil {
			t.Errorf("%s: %s accepted", name, s)
		}
	}
}
