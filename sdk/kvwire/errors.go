package kvwire

import (
	"errors"
	"fmt"
)

// Sentinels for errors.Is. Every error Fetch returns, other than a handler's own error or the context's, matches
// exactly one of ErrProtocol, ErrTimeout, ErrConnLost, or is a *RemoteError.
var (
	// ErrProtocol matches every *ProtocolError, *UnknownTypeError, *ChecksumError and *FrameTooLargeError: the
	// peer sent bytes that are not a valid exchange.
	ErrProtocol = errors.New("kvwire: protocol error")
	// ErrTimeout matches every *TimeoutError: a deadline passed (the exchange's, a frame's, a dial's or a write's).
	ErrTimeout = errors.New("kvwire: timeout")
	// ErrConnLost matches every *ConnLostError: the connection closed or broke before the exchange ended.
	ErrConnLost = errors.New("kvwire: connection lost")

	// ErrServerClosed is returned by Server.Serve after Stop or Close.
	ErrServerClosed = errors.New("kvwire: server closed")
	// ErrJobExpired is returned by Job.Accept when the server already answered the job (pickup timeout, client
	// gone, server stopping) or the job was accepted or rejected before.
	ErrJobExpired = errors.New("kvwire: job no longer available")
	// ErrJobAborted is what Writer methods return once the job cannot go on: the client went away, a write
	// failed or stalled past its deadline, the job ran past its maximum duration, or the server shut down. The
	// engine should stop computing for the job; Writer.Err tells the cause.
	ErrJobAborted = errors.New("kvwire: job aborted")
	// ErrWriterClosed is returned by Writer methods called after Done or Error.
	ErrWriterClosed = errors.New("kvwire: writer already finished")
)

// ProtocolError reports bytes that break the protocol: a malformed frame or message, a missing or mistyped
// field, or a message out of order.
type ProtocolError struct {
	Msg string
	Err error // the underlying decoding error, if any
}

func (e *ProtocolError) Error() string {
	if e.Err != nil {
		return "kvwire: protocol error: " + e.Msg + ": " + e.Err.Error()
	}
	return "kvwire: protocol error: " + e.Msg
}

func (e *ProtocolError) Unwrap() error        { return e.Err }
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func protocolErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// UnknownTypeError reports a message whose `type` this package does not know.
type UnknownTypeError struct {
	Type string
}

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("kvwire: protocol error: unknown message type %q", e.Type)
}

func (e *UnknownTypeError) Is(target error) bool { return target == ErrProtocol }

// FrameTooLargeError reports a length prefix above the receiver's maximum frame size.
type FrameTooLargeError struct {
	Size, Max int64
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("kvwire: protocol error: frame of %d bytes exceeds the maximum of %d", e.Size, e.Max)
}

func (e *FrameTooLargeError) Is(target error) bool { return target == ErrProtocol }

// ChecksumError reports a chunk whose bytes do not match the checksum the server sent with them.
type ChecksumError struct {
	Type      MessageType
	LayerIdx  int
	Want, Got uint32
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("kvwire: protocol error: %s for layer %d: crc32c is %08x, the server sent %08x",
		e.Type, e.LayerIdx, e.Got, e.Want)
}

func (e *ChecksumError) Is(target error) bool { return target == ErrProtocol }

// RemoteError is an error message the server sent.
type RemoteError struct {
	Code    int
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("kvwire: remote error %d: %s", e.Code, e.Message)
}

// TimeoutError reports a deadline that passed during Op.
type TimeoutError struct {
	Op  string
	Err error
}

func (e *TimeoutError) Error() string {
	if e.Err != nil {
		return "kvwire: timeout: " + e.Op + ": " + e.Err.Error()
	}
	return "kvwire: timeout: " + e.Op
}

func (e *TimeoutError) Unwrap() error        { return e.Err }
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Timeout reports true, so a *TimeoutError also reads as a timeout through net.Error-style checks.
func (e *TimeoutError) Timeout() bool { return true }

// ConnLostError reports a connection that closed or broke during Op.
type ConnLostError struct {
	Op  string
	Err error
}

func (e *ConnLostError) Error() string {
	if e.Err != nil {
		return "kvwire: connection lost: " + e.Op + ": " + e.Err.Error()
	}
	return "kvwire: connection lost: " + e.Op
}

func (e *ConnLostError) Unwrap() error        { return e.Err }
func (e *ConnLostError) Is(target error) bool { return target == ErrConnLost }
