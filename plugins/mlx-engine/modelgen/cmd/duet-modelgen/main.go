// Command duet-modelgen writes a generated model directory (Hugging Face / mlx-community layout) for tests,
// benchmarks and the gateway's default model.
//
//	duet-modelgen -preset embedded -out /tmp/embedded
//	duet-modelgen -preset tiny -family qwen3 -dtype float16 -bits 4 -group-size 32 -shards 2 -out /tmp/q
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "duet-modelgen:", err)
		os.Exit(1)
	}
}

func run() error {
	preset := flag.String("preset", "embedded", "starting point: embedded, bench100m, moe2b, moe2b-dense, hybrid, hybrid-dense or tiny")
	out := flag.String("out", "", "directory to write (required)")
	family := flag.String("family", "", "override: a model family (llama, mistral, qwen2, qwen3, qwen3_moe, qwen2_moe, mixtral, gemma3_text, gemma3, gpt_oss, qwen3_next, qwen3_5, qwen3_5_moe); tiny starts from the family's tiny preset")
	layout := flag.String("layout", "", "override: how experts are stored, hf (one module per expert) or mlx (stacked switch_mlp)")
	dt := flag.String("dtype", "", "override: float32, float16 or bfloat16")
	bits := flag.Int("bits", 0, "quantize linear layers and embeddings to this many bits (2, 4, 8)")
	group := flag.Int("group-size", 64, "quantization group size (32, 64, 128)")
	shards := flag.Int("shards", 0, "override: number of safetensors files")
	tok := flag.String("tokenizer", "", "override: bytelevel or sentencepiece")
	tied := flag.Bool("tied", false, "tie the output layer to the embeddings")
	seed := flag.Uint64("seed", 0, "override the random seed (0 keeps the preset's)")
	flag.Parse()
	if *out == "" {
		flag.Usage()
		return fmt.Errorf("-out is required")
	}
	var o modelgen.Options
	switch *preset {
	case "embedded":
		o = modelgen.Embedded()
	case "bench100m":
		o = modelgen.Bench100M()
	case "moe2b":
		o = modelgen.MoE2B()
	case "moe2b-dense":
		o = modelgen.MoE2BDense()
	case "hybrid":
		o = modelgen.HybridBench()
	case "hybrid-dense":
		o = modelgen.HybridBenchDense()
	case "tiny":
		o = modelgen.Tiny()
	default:
		return fmt.Errorf("unknown preset %q", *preset)
	}
	if *family != "" {
		o.Family = model.Family(*family)
		if *preset == "tiny" {
			o = modelgen.TinyFamily(o.Family) // the same as Tiny for the Llama-shaped families
		}
	}
	if *layout != "" {
		o.Layout = modelgen.Layout(*layout)
	}
	if *dt != "" {
		d, err := dtype.Parse(*dt)
		if err != nil {
			return err
		}
		o.DType = d
	}
	if *bits != 0 {
		o.Quantization = &modelgen.Quantization{Bits: *bits, GroupSize: *group}
	}
	if *shards != 0 {
		o.Shards = *shards
	}
	if *tok != "" {
		o.Tokenizer = modelgen.TokenizerKind(*tok)
	}
	if *tied {
		o.TieWordEmbeddings = true
	}
	if *seed != 0 {
		o.Seed = *seed
	}
	start := time.Now()
	if err := modelgen.Generate(*out, o); err != nil {
		return err
	}
	fmt.Printf("wrote %s in %v\n", *out, time.Since(start).Round(time.Millisecond))
	return nil
}
