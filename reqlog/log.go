package reqlog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// Config is where the log goes and its bounds.
type Config struct {
	// Path is the current file; rotated files are Path.1 (newest) to
	// Path.Files. Required.
	Path string
	// MaxBytes bounds each file: a line that would take the current file
	// past it goes to a fresh one, and a line longer than it is dropped.
	// Zero means DefaultMaxBytes.
	MaxBytes int64
	// Files is how many rotated files are kept besides the current one;
	// zero keeps none (the current file is truncated when full).
	Files int
	// Buffer bounds the records waiting for the writer; a record that
	// finds it full is dropped and counted. Zero means DefaultBuffer.
	Buffer int
	// Logger reports the first write error of a run. nil means none.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxBytes = 100 << 20
	DefaultBuffer   = 4096
)

// Log is the request log. Its Done never blocks: the record goes to a
// bounded channel that Run empties.
type Log struct {
	cfg     Config
	ch      chan slo.Record
	written atomic.Uint64
	dropped atomic.Uint64 // channel full, or Run has ended
	failed  atomic.Uint64 // too long for a file, or the write failed
	closed  atomic.Bool
}

var _ proxy.Observer = (*Log)(nil)

// New checks cfg and returns a log that writes nothing until Run.
func New(cfg Config) (*Log, error) {
	if cfg.Path == "" {
		return nil, errors.New("reqlog: no path")
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.MaxBytes < 0 || cfg.Files < 0 || cfg.Buffer < 0 {
		return nil, errors.New("reqlog: negative bound")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Log{cfg: cfg, ch: make(chan slo.Record, cfg.Buffer)}, nil
}

// FirstChunk and Chunk are no-ops: the log takes finished records only.
func (l *Log) FirstChunk(proxy.FirstChunk) {}

// Chunk implements proxy.Observer.
func (l *Log) Chunk(proxy.Chunk) {}

// Done queues the record for the writer, or drops and counts it when the
// queue is full or Run has ended.
func (l *Log) Done(r slo.Record) {
	if l.closed.Load() {
		l.dropped.Add(1)
		return
	}
	select {
	case l.ch <- r:
	default:
		l.dropped.Add(1)
	}
}

// Written, Dropped and Failed count lines written, records dropped because
// the queue was full (or the log had stopped), and lines lost to a write
// error or to their length.
func (l *Log) Written() uint64 { return l.written.Load() }

// Dropped counts records dropped unwritten because the queue was full.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Failed counts lines lost to a write error or longer than MaxBytes.
func (l *Log) Failed() uint64 { return l.failed.Load() }

// Run opens the file (appending to what it holds) and writes every
// queued record until ctx ends; then it writes what is still queued and
// closes the file. Its error is a failure to open the file; later write
// errors are counted (Failed) and the first one is logged.
func (l *Log) Run(ctx context.Context) error {
	w := &writer{cfg: l.cfg}
	if err := w.open(); err != nil {
		return fmt.Errorf("request log %s: %w", l.cfg.Path, err)
	}
	logged := false
	put := func(r *slo.Record) {
		if err := w.put(r); err != nil {
			l.failed.Add(1)
			if !logged {
				logged = true
				l.cfg.Logger.Warn("request log: line lost", "path", l.cfg.Path, "err", err)
			}
			return
		}
		l.written.Add(1)
	}
	for {
		select {
		case r := <-l.ch:
			put(&r)
			for more := true; more; {
				select {
				case r := <-l.ch:
					put(&r)
				default:
					more = false
				}
			}
			if err := w.flush(); err != nil && !logged {
				logged = true
				l.cfg.Logger.Warn("request log: flush", "path", l.cfg.Path, "err", err)
			}
		case <-ctx.Done():
			l.closed.Store(true)
			for {
				select {
				case r := <-l.ch:
					put(&r)
					continue
				default:
				}
				break
			}
			return w.close()
		}
	}
}

// writer owns the current file (Run's goroutine only).
type writer struct {
	cfg  Config
	f    *os.File
	buf  *bufio.Writer
	size int64
	line []byte
}

func (w *writer) open() error {
	f, err := os.OpenFile(w.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.size = f, st.Size()
	if w.buf == nil {
		w.buf = bufio.NewWriterSize(f, 64<<10)
	} else {
		w.buf.Reset(f)
	}
	return nil
}

// put encodes r and writes it, rotating first when it would not fit.
func (w *writer) put(r *slo.Record) error {
	b, err := json.Marshal(FromRecord(r))
	if err != nil {
		return err
	}
	b = append(b, '\n')
	n := int64(len(b))
	if n > w.cfg.MaxBytes {
		return fmt.Errorf("line of %d bytes is longer than a file may be (%d)", n, w.cfg.MaxBytes)
	}
	if w.size+n > w.cfg.MaxBytes {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	if _, err := w.buf.Write(b); err != nil {
		return err
	}
	w.size += n
	return nil
}

// rotate closes the current file, shifts Path.i to Path.i+1 (the oldest
// beyond Files is removed) and Path to Path.1, and opens a fresh Path.
func (w *writer) rotate() error {
	if err := w.close(); err != nil {
		return err
	}
	p := w.cfg.Path
	if w.cfg.Files == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return w.open()
	}
	os.Remove(p + "." + strconv.Itoa(w.cfg.Files))
	for i := w.cfg.Files - 1; i >= 1; i-- {
		if err := os.Rename(p+"."+strconv.Itoa(i), p+"."+strconv.Itoa(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(p, p+".1"); err != nil {
		return err
	}
	return w.open()
}

func (w *writer) flush() error { return w.buf.Flush() }

func (w *writer) close() error {
	ferr := w.buf.Flush()
	cerr := w.f.Close()
	return errors.Join(ferr, cerr)
}
