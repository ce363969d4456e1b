package serfcluster

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// serfLogWriter forwards serf's and memberlist's standard-library log lines ("[WARN] memberlist: ...") to
// slog at the level their prefix names.
type serfLogWriter struct{ log *slog.Logger }

func newSerfLogger(l *slog.Logger) *log.Logger {
	return log.New(serfLogWriter{l.With("component", "serf")}, "", 0)
}

func (w serfLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{
		"[TRACE]": slog.LevelDebug - 4, "[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo,
		"[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError, "[ERROR]": slog.LevelError,
	} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			msg, level = strings.TrimSpace(rest), l
			break
		}
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}
