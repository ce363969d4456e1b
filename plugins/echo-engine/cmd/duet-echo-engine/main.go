// Command duet-echo-engine serves the echo engine as a duet plugin. Start it through a gateway:
// duet --engine path/to/duet-echo-engine --model echo.
package main

import (
	echo "github.com/duet-ai/duet/plugins/echo-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

func main() {
	engine.Serve(echo.New())
}
