package enginemetrics

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// WellFormed reports whether a line of an exposition in the text format
// would pass a strict parser (Prometheus's, an endpoint picker's) on its
// own: a blank line, "# HELP name text", "# TYPE name type", or a sample
// "name{label="value",...} value [timestamp]" with legacy metric and label
// names, in UTF-8. Another comment, or garbage from a broken engine, is
// not. (The gateway's own parse skips what it cannot read; a body passed
// on to someone else's parser must hold only such lines.)
func WellFormed(line []byte) bool {
	line = bytes.TrimRight(line, "\r\n")
	if !utf8.Valid(line) {
		return false
	}
	b := bytes.TrimLeft(line, " \t")
	if len(b) == 0 {
		return true
	}
	if b[0] == '#' {
		f := bytes.Fields(b[1:])
		switch {
		case len(f) >= 2 && string(f[0]) == "HELP":
			return legacyName(f[1], true)
		case len(f) == 3 && string(f[0]) == "TYPE":
			switch string(f[2]) {
			case "counter", "gauge", "histogram", "summary", "untyped":
				return legacyName(f[1], true)
			}
		}
		return false
	}
	i := bytes.IndexAny(b, "{ \t")
	if i < 0 || !legacyName(b[:i], true) {
		return false
	}
	rest := b[i:]
	if rest[0] == '{' {
		names := true
		r, ok := labels(rest[1:], func(name, _ []byte) { names = names && legacyName(name, false) })
		if !ok || !names {
			return false
		}
		rest = r
	}
	f := bytes.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return false
	}
	if _, err := strconv.ParseFloat(string(f[0]), 64); err != nil {
		return false
	}
	if len(f) == 2 {
		if _, err := strconv.ParseInt(string(f[1]), 10, 64); err != nil {
			return false
		}
	}
	return true
}

// legacyName reports whether b is a legacy metric name
// ([a-zA-Z_:][a-zA-Z0-9_:]*) or, without colons, a label name.
func legacyName(b []byte, colon bool) bool {
	if len(b) == 0 {
		return false
	}
	for i, c := range b {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (colon && c == ':') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}
