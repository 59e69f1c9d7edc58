package eppmetrics

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// validLine reports whether a line of the engine's body may be passed to
// the picker: a blank line, a "# HELP name text" or "# TYPE name type"
// line, or a sample "name{label="value",...} value [timestamp]", with
// legacy metric and label names, in UTF-8. Anything else (another comment,
// garbage from a broken engine) is left out, so that one bad line of the
// engine's never makes the picker reject the pod's whole exposition.
func validLine(line []byte) bool {
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
			return validName(f[1], true)
		case len(f) == 3 && string(f[0]) == "TYPE":
			switch string(f[2]) {
			case "counter", "gauge", "histogram", "summary", "untyped":
				return validName(f[1], true)
			}
		}
		return false
	}
	i := 0
	for i < len(b) && b[i] != '{' && b[i] != ' ' && b[i] != '\t' {
		i++
	}
	if !validName(b[:i], true) {
		return false
	}
	rest := b[i:]
	if len(rest) > 0 && rest[0] == '{' {
		n, ok := labels(rest)
		if !ok {
			return false
		}
		rest = rest[n:]
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

// labels returns the length of the label set that b starts with ("{" to
// its "}") and whether it is well formed: name="value" pairs separated by
// commas (a trailing one allowed), values with \\, \" and \n escapes.
func labels(b []byte) (int, bool) {
	i := 1
	for {
		for i < len(b) && b[i] == ' ' {
			i++
		}
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		j := i
		for j < len(b) && b[j] != '=' {
			j++
		}
		if j == len(b) || !validName(bytes.TrimSpace(b[i:j]), false) || j+1 >= len(b) || b[j+1] != '"' {
			return 0, false
		}
		i = j + 2
		for i < len(b) && b[i] != '"' {
			if b[i] == '\\' {
				if i+1 >= len(b) || (b[i+1] != '\\' && b[i+1] != '"' && b[i+1] != 'n') {
					return 0, false
				}
				i++
			}
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		i++ // the closing quote
		for i < len(b) && b[i] == ' ' {
			i++
		}
		switch {
		case i < len(b) && b[i] == ',':
			i++
		case i < len(b) && b[i] == '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// validName reports whether b is a legacy metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)
// or, without colons, a label name.
func validName(b []byte, colon bool) bool {
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
