package anthropic

import (
	"net/http"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// Anthropic's error types, by the HTTP status they come with.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeTooLarge       = "request_too_large"
	TypeRateLimit      = "rate_limit_error"
	TypeAPI            = "api_error"
	TypeTimeout        = "timeout_error"
	TypeOverloaded     = "overloaded_error"
)

// ErrorType is Anthropic's error type for a status. Anthropic uses invalid_request_error for every 4xx it
// does not name, and overloaded_error for its 529; the gateway's 503 (no engine or instance can take the
// request now) means the same, and keeps its status, which other gateways and SDKs retry on.
func ErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypePermission
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case http.StatusTooManyRequests:
		return TypeRateLimit
	case http.StatusGatewayTimeout:
		return TypeTimeout
	case http.StatusServiceUnavailable, 529:
		return TypeOverloaded
	}
	if status >= 400 && status < 500 {
		return TypeInvalidRequest
	}
	return TypeAPI
}

// AppendError appends the error envelope {"type":"error","error":{"type":...,"message":...}}, the body of
// an error response and the data of a stream's error event.
func AppendError(dst []byte, e *apicore.Error) []byte {
	dst = append(dst, `{"type":"error","error":{"type":"`...)
	dst = append(dst, ErrorType(e.Status)...)
	dst = append(dst, `","message":`...)
	dst = apicore.AppendString(dst, e.Message)
	return append(dst, "}}"...)
}
