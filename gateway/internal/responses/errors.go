package responses

import (
	"fmt"
	"net/http"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// NotStored is the 404 of a request for a stored response (GET, DELETE, cancel, input items): duet stores
// none.
func NotStored(id string) *apicore.Error {
	return &apicore.Error{
		Status: http.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "not_found",
		Message: fmt.Sprintf("Response with id '%s' not found: duet does not store responses (it keeps no state "+
			"between requests), so none can be retrieved, deleted or cancelled. Read a response when it is made, "+
			"and send the whole conversation as input.", id),
	}
}

// params maps the fields that errors from the engine and the shared pipeline name as chat completions spells
// them to this API's.
var params = map[string]string{
	"messages":        "input",
	"max_tokens":      "max_output_tokens",
	"response_format": "text.format",
}

// Rename returns e with its param spelled as this API spells it.
func Rename(e *apicore.Error) *apicore.Error {
	p, ok := params[e.Param]
	if !ok {
		return e
	}
	out := *e
	out.Param = p
	return &out
}
