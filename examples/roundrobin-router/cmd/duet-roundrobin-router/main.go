// Command duet-roundrobin-router serves the round-robin router as a duet plugin.
package main

import (
	roundrobin "github.com/duet-ai/duet/examples/roundrobin-router"
	"github.com/duet-ai/duet/sdk/router"
)

func main() {
	router.Serve(roundrobin.New())
}
