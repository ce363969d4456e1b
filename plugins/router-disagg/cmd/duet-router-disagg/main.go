// Command duet-router-disagg serves the P/D router as a duet router plugin:
//
//	duet --router ./duet-router-disagg
//
// It is configured by DUET_DISAGG_* environment variables (see plugins/router-disagg/README.md), which the
// gateway passes on to the plugin. A bad value stops it with a message naming the variable. With
// DUET_DISAGG_STATS_INTERVAL set (a Go duration such as 1m), it logs its routing counters and per-plugin
// latencies at that interval. The gateway also has it built in, as "router-disagg".
package main

import (
	"fmt"
	"os"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
)

func main() {
	r, err := routerdisagg.Plugin()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	router.Serve(r)
}
