package wire

import (
	"bytes"
	"encoding/json"
)

// Finish reads what an OpenAI chunk that finishes a choice, or a whole
// answer, says of its end: the model that answered ("" when absent) and
// the finish reasons of its choices, appended to reasons (at most max in
// all). data must be JSON (Inspect has read it); a field that is not a
// string is skipped. It walks the payload once, as the Assembler does,
// and allocates only the strings it returns.
func Finish(data []byte, reasons []string, max int) (model string, out []string) {
	out = reasons
	members(data, func(k, v []byte) {
		switch {
		case keyIs(k, "model"):
			model = rawString(v)
		case keyIs(k, "choices"):
			elements(v, func(c []byte) {
				members(c, func(k, v []byte) {
					if keyIs(k, "finish_reason") && len(out) < max {
						if r := rawString(v); r != "" {
							out = append(out, r)
						}
					}
				})
			})
		}
	})
	return model, out
}

// rawString is the raw JSON value v as a string, "" when it is not one.
func rawString(v []byte) string {
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1])
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}
