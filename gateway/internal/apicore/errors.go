package apicore

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/sdk/engine"
)

// Error is an API error rendered as an OpenAI error envelope:
// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
type Error struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Error types, as the OpenAI API names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeModelOutput    = "model_output_error"
)

// BadRequest is a 400 about one request field.
func BadRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ModelNotFound is the 404 for an unknown model.
func ModelNotFound(model string) *Error {
	return &Error{
		Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model),
	}
}

// Unauthorized is the 401 for a missing or wrong API key.
func Unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeAuthentication, Code: "invalid_api_key", Message: msg}
}

// TooManyRequests is the 429 for a gateway or engine at capacity.
func TooManyRequests(msg string) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded", Message: msg}
}

// Unavailable is the 503 for a gateway that cannot serve now (engine plugin down, no instance ready).
func Unavailable(msg string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: "service_unavailable", Message: msg}
}

// Internal is the 500 for anything else.
func Internal(msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "internal_error", Message: msg}
}

// FromEngine maps an engine error to its API error.
func FromEngine(err error) *Error {
	// The code comes from the innermost *engine.Error, the message from the whole chain, which may add
	// context (e.g. that the plugin died) around it.
	e := &engine.Error{Code: engine.CodeOf(err), Message: err.Error()}
	var inner *engine.Error
	if errors.As(err, &inner) {
		e.Param = inner.Param
	}
	switch e.Code {
	case engine.CodeInvalidArgument:
		return BadRequest(e.Param, "%s", e.Message)
	case engine.CodeContextLength:
		out := BadRequest(e.Param, "%s", e.Message)
		out.Code = "context_length_exceeded"
		if out.Param == "" {
			out.Param = "messages"
		}
		return out
	case engine.CodeNotFound:
		return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "not_found", Message: e.Message}
	case engine.CodeResourceExhausted:
		return TooManyRequests(e.Message)
	case engine.CodeInvalidOutput:
		// Not a 500: nothing failed, the model wrote something the request rules out. The client can retry
		// (sampling differs) or constrain the output (strict tools, tool_choice).
		return &Error{Status: http.StatusUnprocessableEntity, Type: TypeModelOutput, Code: "invalid_tool_call", Message: e.Message}
	case engine.CodeUnavailable, engine.CodeCancelled:
		return Unavailable(e.Message)
	default:
		return Internal(e.Message)
	}
}

// AppendEnvelope appends the error's JSON envelope to dst.
func (e *Error) AppendEnvelope(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = AppendString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = AppendString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = AppendNullableString(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = AppendNullableString(dst, e.Code)
	return append(dst, "}}"...)
}

// ErrorOf is err as a client sees it: an *Error as it is, fiber's errors and a passed deadline as the API
// errors they stand for, an engine's error by its code (FromEngine), and anything else as an internal error
// whose text is for the log only (the caller logs it; the client gets the request id).
func ErrorOf(err error) *Error {
	var apiErr *Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &fe):
		switch fe.Code {
		case fiber.StatusRequestEntityTooLarge:
			return &Error{Status: fe.Code, Type: TypeInvalidRequest, Code: "request_too_large", Message: "The request body is too large."}
		case fiber.StatusNotFound, fiber.StatusMethodNotAllowed:
			return &Error{Status: fe.Code, Type: TypeInvalidRequest, Code: "unknown_url", Message: fe.Message}
		case fiber.StatusRequestTimeout:
			return &Error{Status: fe.Code, Type: TypeInvalidRequest, Code: "timeout", Message: fe.Message}
		default:
			if fe.Code < 500 {
				return &Error{Status: fe.Code, Type: TypeInvalidRequest, Message: fe.Message}
			}
			return &Error{Status: fe.Code, Type: TypeServer, Message: fe.Message}
		}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: fiber.StatusGatewayTimeout, Type: TypeServer, Code: "timeout", Message: "The request took longer than the server allows."}
	default:
		var ee *engine.Error
		if errors.As(err, &ee) {
			return FromEngine(err)
		}
		return Internal("")
	}
}
