package pluginrpc

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const errorDomain = "duet.dev/plugin"

// StatusError returns a gRPC status error that carries a duet error code (reason) and the request parameter at
// fault, so the typed error survives the plugin boundary.
func StatusError(c codes.Code, reason, param, msg string) error {
	st := status.New(c, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}
	if param != "" {
		info.Metadata = map[string]string{"param": param}
	}
	if withInfo, err := st.WithDetails(info); err == nil {
		st = withInfo
	}
	return st.Err()
}

// Status is what ParseStatus learns from a gRPC error.
type Status struct {
	Code    codes.Code
	Reason  string // duet error code, empty when the error did not come from StatusError
	Param   string
	Message string
}

// ParseStatus reads a gRPC error back. ok is false when err is not a gRPC status error.
func ParseStatus(err error) (s Status, ok bool) {
	st, ok := status.FromError(err)
	if !ok {
		return Status{}, false
	}
	s = Status{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == errorDomain {
			s.Reason = info.GetReason()
			s.Param = info.GetMetadata()["param"]
		}
	}
	return s, true
}
