package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Usage: duet bench <benchmark> [flags]

Benchmarks:
  pd        exo's prefill/decode benchmark: prefill_alone, disaggregated and decode_alone per prompt and
            generation length, TTFT and inter-token latency percentiles, KV moved, decode isolation
  gateway   what the gateway adds to a request's latency and to a stream's throughput (echo engine)
  kvwire    goodput of the KV wire against raw TCP, between two hosts or on loopback
  load      N concurrent clients with a prompt-length mix for a duration

Each prints a table; --out writes every run as JSON, --svg a chart. duet bench <benchmark> -h lists its flags.
`

// Main runs `duet bench` with the arguments after "bench" and returns the process's exit status: 0, 1 when a
// benchmark failed, 2 for a usage error. Ctrl-C stops the benchmark, which still reports what it measured and
// stops the nodes it started.
func Main(args []string, version string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, version, os.Stdout, os.Stderr)
}

func run(ctx context.Context, args []string, version string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var err error
	switch name, rest := args[0], args[1:]; name {
	case "pd":
		var o PDOptions
		if o, err = ParsePD(rest, stderr); err == nil {
			return status(stderr, RunPD(ctx, o, version, stdout, stderr))
		}
	case "gateway":
		var o GatewayOptions
		if o, err = ParseGateway(rest, stderr); err == nil {
			return status(stderr, RunGateway(ctx, o, version, stdout, stderr))
		}
	case "kvwire":
		var o KVWireOptions
		if o, err = ParseKVWire(rest, stderr); err == nil {
			return status(stderr, RunKVWire(ctx, o, version, stdout, stderr))
		}
	case "load":
		var o LoadOptions
		if o, err = ParseLoad(rest, stderr); err == nil {
			return status(stderr, RunLoad(ctx, o, version, stdout, stderr))
		}
	default:
		fmt.Fprintf(stderr, "duet bench: no benchmark %q\n\n%s", name, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "duet bench %s: %v\n", args[0], err)
	return 2
}

func status(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "duet bench:", err)
	return 1
}
