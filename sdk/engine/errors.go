package engine

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies an engine error. The gateway maps codes to HTTP statuses: CodeInvalidArgument and
// CodeContextLength 400, CodeNotFound 404, CodeInvalidOutput 422, CodeResourceExhausted 429, CodeUnavailable
// 503, anything else 500.
type Code string

// Error codes.
const (
	CodeInvalidArgument   Code = "invalid_argument"
	CodeContextLength     Code = "context_length_exceeded"
	CodeNotFound          Code = "not_found"
	CodeResourceExhausted Code = "resource_exhausted"
	CodeUnavailable       Code = "unavailable"
	CodeCancelled         Code = "cancelled"
	// CodeInvalidOutput: the model wrote what the request cannot accept, e.g. a tool call that is malformed,
	// names a tool the request does not define, or whose arguments do not match its schema. Neither the
	// client's fault nor the server's; the message quotes what the model wrote.
	CodeInvalidOutput Code = "invalid_output"
	CodeInternal      Code = "internal"
)

// Error is an error with a code that survives the plugin boundary.
type Error struct {
	Code    Code
	Message string
	// Param names the request field at fault, for CodeInvalidArgument (e.g. "max_tokens").
	Param string
	// Detail is for logs only, never for clients: what lies behind a transport failure (gRPC's message, which
	// can name socket paths). It does not cross the plugin boundary.
	Detail string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidParam returns a CodeInvalidArgument error about one request field.
func InvalidParam(param, format string, args ...any) error {
	return &Error{Code: CodeInvalidArgument, Param: param, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err: its own when it is (or wraps) an *Error, CodeCancelled for context errors,
// CodeInternal otherwise.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	case isContextErr(err):
		return CodeCancelled
	default:
		return CodeInternal
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
