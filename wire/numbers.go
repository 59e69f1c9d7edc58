package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// This file holds the field types that read a request body's numbers and
// flags the way each engine reads them, so that the gateway rejects exactly
// what the engine would reject and reads what the engine would act on.

// wholeNumber is an integer field read as pydantic's lax int reads JSON
// (vLLM's and the Responses API's request models): a number with no
// fractional part (256, 256.0, 2.56e2, -0.0) or null (absent). Anything else
// is recorded, not returned, so that encoding/json keeps decoding (a later
// repeated key still wins, as in Python's json) and check reports it.
type wholeNumber struct {
	v    int
	set  bool
	bad  uint8  // a badKind when the value was not a whole number
	text string // the number's text, for badFraction and badRange
}

const (
	badNone uint8 = iota
	badString
	badBool
	badObject
	badArray
	badFraction
	badRange
)

func (n *wholeNumber) UnmarshalJSON(b []byte) error {
	*n = wholeNumber{}
	switch b[0] {
	case 'n':
		// null: absent.
	case '"':
		n.bad = badString
	case 't', 'f':
		n.bad = badBool
	case '{':
		n.bad = badObject
	case '[':
		n.bad = badArray
	default:
		v, kind := parseWhole(b)
		if kind != badNone {
			n.bad, n.text = kind, shortText(b)
			break
		}
		n.v, n.set = v, true
	}
	return nil
}

// parseWhole reads a JSON number that must be a whole number within int.
// An integer literal is read exactly; one with a fraction or an exponent is
// read as a float64 (as Python's json does) and must have no fractional part.
func parseWhole(b []byte) (int, uint8) {
	plain := true
	for _, c := range b {
		if c == '.' || c == 'e' || c == 'E' {
			plain = false
			break
		}
	}
	if plain {
		v, err := strconv.ParseInt(string(b), 10, strconv.IntSize)
		if err != nil {
			return 0, badRange
		}
		return int(v), badNone
	}
	f, err := strconv.ParseFloat(string(b), 64)
	switch {
	case err != nil: // ±Inf: out of range
		return 0, badRange
	case f != math.Trunc(f):
		return 0, badFraction
	case f < math.MinInt || f >= math.MaxInt: // ±2^63 as float64 where int has 64 bits
		return 0, badRange
	}
	return int(f), badNone
}

// shortText is a number's text for an error message, cut to a sane length.
func shortText(b []byte) string {
	const max = 32
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// check returns the error for a value that was not a whole number.
func (n *wholeNumber) check(field string) error {
	switch n.bad {
	case badString:
		return fmt.Errorf("field %q must be an integer, not a string", field)
	case badBool:
		return fmt.Errorf("field %q must be an integer, not a boolean", field)
	case badObject:
		return fmt.Errorf("field %q must be an integer, not an object", field)
	case badArray:
		return fmt.Errorf("field %q must be an integer, not an array", field)
	case badFraction:
		return fmt.Errorf("field %q must be a whole number, not %s", field, n.text)
	case badRange:
		return fmt.Errorf("field %q is out of range: %s", field, n.text)
	}
	return nil
}

// ptr returns the value as a *int, nil when absent.
func (n *wholeNumber) ptr() *int {
	if !n.set {
		return nil
	}
	v := n.v
	return &v
}

// The loose types read a field as llama.cpp's server reads it (json_value
// over nlohmann::json): a value of the wrong type, like null, means "absent"
// and the engine uses its default; it is never an error.

// looseInt is an integer field: any number, truncated toward zero as a C++
// cast does, or a boolean (1 or 0). A number outside int is taken as absent.
type looseInt struct {
	v   int
	set bool
}

func (n *looseInt) UnmarshalJSON(b []byte) error {
	*n = looseInt{}
	switch c := b[0]; {
	case c == 't':
		*n = looseInt{1, true}
	case c == 'f':
		*n = looseInt{0, true}
	case c == '-' || '0' <= c && c <= '9':
		if v, err := strconv.ParseInt(string(b), 10, strconv.IntSize); err == nil {
			*n = looseInt{int(v), true}
			break
		}
		f, err := strconv.ParseFloat(string(b), 64)
		if err == nil && f >= math.MinInt && f < math.MaxInt {
			*n = looseInt{int(f), true} // Go's conversion truncates toward zero
		}
	}
	return nil
}

// looseBool is a boolean field: true or false; anything else is absent.
type looseBool struct{ v, set bool }

func (x *looseBool) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case 't':
		*x = looseBool{true, true}
	case 'f':
		*x = looseBool{false, true}
	default:
		*x = looseBool{}
	}
	return nil
}

// looseString is a string field: a string; anything else is absent.
type looseString struct {
	v   string
	set bool
}

func (x *looseString) UnmarshalJSON(b []byte) error {
	*x = looseString{}
	if b[0] == '"' {
		var s string
		if json.Unmarshal(b, &s) == nil {
			*x = looseString{s, true}
		}
	}
	return nil
}
