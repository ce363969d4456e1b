package mlxengine_test

import (
	"context"
	"testing"
	"time"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

// BenchmarkDecodeConstrained measures decode speed on the embedded model with and without a JSON schema: the
// mask of each step is the price of the guarantee (target: at most 10% slower). It reports decode tokens per
// second of the constrained and the free runs (the same number of tokens each), measured alternately in one
// process so that the ratio is fair on a noisy machine.
//
//	go test ./plugins/mlx-engine -run '^$' -bench DecodeConstrained -benchtime 20x
func BenchmarkDecodeConstrained(b *testing.B) {
	e := mlxengine.New(nil)
	b.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{InstanceID: "i", Model: mlxengine.EmbeddedModel,
		Options: map[string]string{"prefix_cache_mb": "0"}})
	if err != nil {
		b.Fatal(err)
	}
	schema := []byte(`{"type":"object","properties":{"title":{"type":"string","maxLength":200},
		"tags":{"type":"array","items":{"type":"string","enum":["red","green","blue"]},"maxItems":40},
		"parts":{"type":"array","maxItems":20,"items":{"type":"object","properties":{"name":{"type":"string","maxLength":40},"n":{"type":"integer"}},"required":["name","n"]}}},
		"required":["title","tags","parts"],"additionalProperties":false}`)
	run := func(rf engine.ResponseFormat, seed int64, maxTokens int) (tokens int, decode time.Duration) {
		var f *engine.Final
		err := e.Generate(context.Background(), engine.GenerateRequest{InstanceID: d.InstanceID,
			Messages: []engine.Message{{Role: "user", Content: "Describe the sea at night as a record."}},
			Sampling: engine.Sampling{MaxTokens: maxTokens, Temperature: 1, Seed: &seed, IgnoreEOS: rf.Type == ""}, ResponseFormat: rf},
			func(ev engine.Event) error {
				if ev.Final != nil {
					f = ev.Final
				}
				return nil
			})
		if err != nil || f == nil || f.FinishReason == engine.FinishError {
			b.Fatalf("%v %+v", err, f)
		}
		return f.Usage.CompletionTokens, f.Timings.Decode
	}
	constrained := engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "record", Schema: schema, Strict: true}
	run(constrained, 0, 256) // compile the grammar and warm its first masks
	var ct, ft int
	var cd, fd time.Duration
	b.ResetTimer()
	for i := range b.N {
		// The free run decodes as many tokens as the constrained one did: a step's cost grows with the context.
		n, dd := run(constrained, int64(i), 256)
		ct, cd = ct+n, cd+dd
		n, dd = run(engine.ResponseFormat{}, int64(i), n)
		ft, fd = ft+n, fd+dd
	}
	cs, fs := float64(ct)/cd.Seconds(), float64(ft)/fd.Seconds()
	b.ReportMetric(cs, "constrained_tok/s")
	b.ReportMetric(fs, "free_tok/s")
	b.ReportMetric(100*(1-cs/fs), "slowdown_%")
}
