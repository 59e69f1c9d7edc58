package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
)

// logCounter is the slog.Handler of the gateways and the simulator: it
// writes every record at info and above to the log file and counts the
// warnings and errors by message, for the summary. (The gateway's HTTP
// servers log their own errors, such as a handler's panic, through it at
// warn.)
type logCounter struct {
	h      slog.Handler
	shared *logCounts
	who    string // the gateway's or component's name, from WithAttrs
}

type logCounts struct {
	mu sync.Mutex
	n  map[logKey]int
}

type logKey struct {
	level slog.Level
	who   string
	msg   string // with the record's reason, if it has one
}

func newLogCounter(w io.Writer) *logCounter {
	return &logCounter{
		h:      slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}),
		shared: &logCounts{n: map[logKey]int{}},
	}
}

func (l *logCounter) Enabled(ctx context.Context, lv slog.Level) bool { return l.h.Enabled(ctx, lv) }

func (l *logCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				msg += " reason=" + a.Value.String()
				return false
			}
			return true
		})
		l.shared.mu.Lock()
		l.shared.n[logKey{r.Level, l.who, msg}]++
		l.shared.mu.Unlock()
	}
	return l.h.Handle(ctx, r)
}

func (l *logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	who := l.who
	for _, a := range as {
		if a.Key == "gateway" || a.Key == "component" {
			who = a.Value.String()
		}
	}
	return &logCounter{h: l.h.WithAttrs(as), shared: l.shared, who: who}
}

func (l *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{h: l.h.WithGroup(name), shared: l.shared, who: l.who}
}

// warnings returns the counts of warnings and errors by level and message.
func (l *logCounter) warnings() map[logKey]int {
	l.shared.mu.Lock()
	defer l.shared.mu.Unlock()
	out := make(map[logKey]int, len(l.shared.n))
	for k, v := range l.shared.n {
		out[k] = v
	}
	return out
}
