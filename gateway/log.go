package gateway

import (
	"io"
	"log/slog"
)

// NewLogger returns the logger Config asks for: text or JSON lines on w at
// Config.LogLevel.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
