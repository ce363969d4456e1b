package cpu

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// BenchmarkHybrid measures a hybrid model at a realistic shape (modelgen.HybridBench: qwen3_next, 24 layers of
// width 1024, full attention every 4th, Gated DeltaNet in the others, 64 experts top-4, 4-bit, mlx layout,
// generated into a temporary directory) next to the dense qwen3 of the same active size
// (modelgen.HybridBenchDense), on GOMAXPROCS threads with the weights kept as stored:
//
//   - prefill-512, prefill-2k, prefill-8k: tok/s of a prompt of that length (docs/hybrid-design.md §6.3). The
//     dense model's attention grows with the length in every layer, the hybrid's in a quarter of them;
//   - rule-tokens=N (hybrid only): the linear layers' delta rule alone (linearRule, the model's dims and
//     weights, calls of the model's prefill chunk, state carried) over N tokens, one layer timed and reported
//     per token for all linear layers (rules-ns/token, cpu-rules-ns/token): flat across N, the rule's cost is
//     linear in the sequence;
//   - decode-batch1: tok/s against the read-bandwidth bound of the bytes one token reads (§6.3: the active
//     weights, the attention layers' KV history at BenchContext positions and 2× the linear layers' states,
//     read and written back), each step paired with a read of as many bytes (of-bound, as in BenchmarkMoE).
//
// Prefill runs once per -benchtime 1x; decode takes at least decodeSteps steps whatever -benchtime says.
//
//	flock /tmp/duet-heavy.lock go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench Hybrid -benchtime 1x -timeout 60m
func BenchmarkHybrid(b *testing.B) {
	const decodeSteps = 20
	n := runtime.GOMAXPROCS(0)
	lengths := []struct {
		name string
		n    int
	}{{"512", 512}, {"2k", 2048}, {"8k", 8192}}
	for _, tc := range []struct {
		name string
		o    modelgen.Options
	}{{"hybrid-q4", modelgen.HybridBench()}, {"dense-active-q4", modelgen.HybridBenchDense()}} {
		m, cm := loadBenchModel(b, tc.name, tc.o, n)
		weights, macs := weightBytesPerToken(cm), float64(macsPerToken(cm))
		kv, state := decodeStateBytes(cm, backendtest.BenchContext+1)
		p := backendtest.BenchModel{Prefill: 8192}.BenchPrompt(cm.VocabSize())
		b.Run(tc.name+"/decode-batch1", func(b *testing.B) {
			benchDecodeVsRead(b, cm, p, n, weights, kv+2*state, macs, decodeSteps)
		})
		for _, l := range lengths {
			b.Run(tc.name+"/prefill-"+l.name, func(b *testing.B) { benchPrefillCPU(b, cm, p[:l.n], macs) })
		}
		if lin := firstLinear(cm); lin != nil {
			layers := 0
			for _, l := range cm.layers {
				if l.lin != nil {
					layers++
				}
			}
			for _, l := range lengths {
				b.Run(fmt.Sprintf("%s/rule-tokens=%d", tc.name, l.n), func(b *testing.B) {
					ns, cpuNs := benchRule(b, cm.pool, cm.kern, lin.d, &lin.w, l.n, cm.chunk)
					b.ReportMetric(ns*float64(layers), "rules-ns/token")
					if cpuNs > 0 {
						b.ReportMetric(cpuNs*float64(layers), "cpu-rules-ns/token")
					}
				})
			}
		}
		cm.Close()
		m.Close()
	}
}

// decodeStateBytes is what a decode step at ctx positions reads besides the weights: the attention layers'
// keys and values (kv) and the linear layers' conv windows and recurrent states (state), as the cache holds
// them.
func decodeStateBytes(m *cpuModel, ctx int) (kv, state int64) {
	el := int64(2)
	if m.kvType == dtype.Float32 {
		el = 4
	}
	for _, l := range m.layers {
		if l.lin == nil {
			kv += 2 * int64(l.kvHeads*l.hd*ctx) * el
			continue
		}
		d := l.lin.d
		state += int64((d.K-1)*d.convDim())*el + int64(d.Nv*d.Dv*d.Dk)*4
	}
	return kv, state
}

// firstLinear is m's first linear layer, nil without one.
func firstLinear(m *cpuModel) *linLayer {
	for _, l := range m.layers {
		if l.lin != nil {
			return l.lin
		}
	}
	return nil
}
