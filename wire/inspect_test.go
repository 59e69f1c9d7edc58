package wire

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

// The definition Inspect must match is inspectSlow, the encoding/json
// decoder it falls back to: on every input the scanner's answer, error text
// included, must be the decoder's.

// sameAnswer reports how Inspect's answer differs from inspectSlow's, or "".
func sameAnswer(data []byte) string {
	got, gotErr := Inspect(data)
	want, wantErr := inspectSlow(data)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		return "error " + errString(gotErr) + ", reference " + errString(wantErr)
	}
	if got.HasOutput != want.HasOutput || got.UsageOnly != want.UsageOnly ||
		got.Finished != want.Finished || got.Error != want.Error ||
		(got.Usage == nil) != (want.Usage == nil) || (got.Usage != nil && *got.Usage != *want.Usage) {
		return "got " + infoString(got) + ", reference " + infoString(want)
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func infoString(i ChunkInfo) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// trickyChunks exercise the corners of encoding/json's semantics that the
// fast path reproduces or hands back: escapes, folded and repeated keys,
// nulls, types, numbers, nesting and malformed input.
var trickyChunks = []string{
	// Top level.
	`null`, " null \n", `nul`, `{}`, ` {} `, `[]`, `"x"`, `1`, `true`, ``, ` `, `{} {}`, `{"a":1}x`, "\ufeff{}",
	// "object".
	`{"object":"error"}`, `{"Object":"error"}`, `{"OBJECT":"error"}`, `{"object":"Error"}`,
	`{"object":"\u0065rror"}`, `{"object":"err\u006fr"}`, `{"object":null}`, `{"object":"error","object":null}`,
	`{"object":"error","object":"x"}`, `{"object":1}`, `{"object":{}}`, `{"object":["error"]}`,
	// Strings and escapes.
	`{"choices":[{"text":"\u0000"}]}`, `{"choices":[{"text":""}]}`, `{"choices":[{"text":null}]}`,
	`{"choices":[{"text":"\""}]}`, `{"choices":[{"text":"\\"}]}`, `{"choices":[{"text":"\ud800"}]}`,
	`{"choices":[{"text":"a","text":""}]}`, `{"choices":[{"text":"a","text":null}]}`, `{"choices":[{"text":1}]}`,
	"{\"choices\":[{\"text\":\"\xff\"}]}", "{\"choices\":[{\"text\":\"\x7f\"}]}", "{\"choices\":[{\"text\":\"\x01\"}]}",
	"{\"x\":\"\xff\xfe\",\"choices\":[]}", "{\"choices\":[{\"delta\":{\"content\":\"\xc3\"}}]}",
	// "delta" merges, nulls, types.
	`{"choices":[{"delta":{"content":"a"},"delta":{"role":"x"}}]}`,
	`{"choices":[{"delta":{"content":"a"},"delta":{"content":""}}]}`,
	`{"choices":[{"delta":{"content":"a"},"delta":null}]}`, `{"choices":[{"delta":null}]}`,
	`{"choices":[{"delta":[]}]}`, `{"choices":[{"delta":"x"}]}`, `{"choices":[{"Delta":{"Content":"a"}}]}`,
	`{"choices":[{"DELTA":{"REASONING_CONTENT":"a"}}]}`, `{"choices":[{"delta":{"Reasoning":"a"}}]}`,
	`{"choices":[{"delta":{"content":{}}}]}`, `{"choices":[{"delta":{"reasoning":false}}]}`,
	// "choices" shapes.
	`{"choices":[null]}`, `{"choices":[null,{"text":"a"}]}`, `{"choices":null,"usage":{}}`, `{"choices":{},"usage":{}}`,
	`{"choices":[1]}`, `{"choices":[[]]}`, `{"choices":"x"}`, `{"choices":[],"usage":{}}`, `{"choices":[null],"usage":{}}`,
	`{"choices":[],"choices":[{"text":"a"}]}`, `{"choices":[{"text":"a"}],"choices":[{"finish_reason":"stop"}]}`,
	`{"choices":[{"text":"a"},{"text":"b"}],"choices":[{}],"choices":[{},{}]}`, `{"choices":null,"choices":[]}`,
	`{"choices":[{"text":"a"}, {"finish_reason":"stop"}]}`, `{"Choices":[{"text":"a"}]}`,
	// "finish_reason".
	`{"choices":[{"finish_reason":"stop","finish_reason":null}]}`, `{"choices":[{"finish_reason":""}]}`,
	`{"choices":[{"finish_reason":5}]}`, `{"choices":[{"finish_reason":{}}]}`, `{"choices":[{"Finish_Reason":"x"}]}`,
	// "tool_calls".
	`{"choices":[{"delta":{"tool_calls":null}}]}`, `{"choices":[{"delta":{"tool_calls":[]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[ ]}}]}`, `{"choices":[{"delta":{"tool_calls":{}}}]}`,
	`{"choices":[{"delta":{"tool_calls":""}}]}`, `{"choices":[{"delta":{"tool_calls":0}}]}`,
	`{"choices":[{"delta":{"tool_calls":false}}]}`, `{"choices":[{"delta":{"tool_calls":[1],"tool_calls":null}}]}`,
	`{"choices":[{"delta":{"tool_calls":null,"tool_calls":[1]}}]}`, `{"choices":[{"delta":{"tool_calls": [] }}]}`,
	// "usage".
	`{"usage":{"prompt_tokens":1.0}}`, `{"usage":{"prompt_tokens":1e2}}`, `{"usage":{"prompt_tokens":-0}}`,
	`{"usage":{"prompt_tokens":-5}}`, `{"usage":{"prompt_tokens":"5"}}`, `{"usage":{"prompt_tokens":null}}`,
	`{"usage":{"prompt_tokens":9223372036854775807}}`, `{"usage":{"prompt_tokens":9223372036854775808}}`,
	`{"usage":{"prompt_tokens":-9223372036854775808}}`, `{"usage":{"prompt_tokens":-9223372036854775809}}`,
	`{"usage":{"prompt_tokens":123456789012345678}}`, `{"usage":{"prompt_tokens":1234567890123456789}}`,
	`{"usage":{"prompt_tokens":1},"usage":{"total_tokens":3}}`, `{"usage":{"prompt_tokens":1},"usage":null,"usage":{"total_tokens":3}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens":null}}`, `{"usage":{"prompt_tokens":1,"prompt_tokens":2}}`,
	`{"usage":{}}`, `{"usage":[]}`, `{"usage":5}`, `{"usage":"x"}`, `{"usage":{"prompt_tokens":true}}`,
	`{"usage":{"prompt_tokens":{}}}`, `{"USAGE":{"Total_Tokens":7}}`, `{"usage":{"prompt_tokens":01}}`,
	`{"usage":{"cached_tokens":1.5,"prompt_tokens_details":{"cached_tokens":0}}}`,
	// "error".
	`{"error":null}`, `{"error":false}`, `{"error":""}`, `{"error": null }`, `{"Error":{}}`,
	`{"error":{},"error":null}`, `{"error":null,"error":0}`, `{"error":[]}`,
	// Keys the fast path leaves to the decoder.
	`{"choic\u0065s":[{"text":"a"}]}`, `{"choiceſ":[{"text":"a"}]}`, `{"usage":{"prompt_toKens":5}}`,
	`{"usage":{"prompt_to\u212aens":5}}`, `{"\u00e9":1,"choices":[]}`, `{"é":1,"choices":[]}`,
	// Whitespace everywhere.
	" { \"choices\" : [ { \"delta\" : { \"content\" : \"a\" } } ] , \"usage\" : { \"prompt_tokens\" : 1 } } ",
	"\t{\r\n\"object\"\n:\n\"error\"\r}\n",
	// Malformed.
	`{"a":}`, `{"a" 1}`, `{"a":1,}`, `{"a":[1,]}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`,
	`{"a":1e+}`, `{"a":"\x"}`, `{"a":"\u12G4"}`, `{"a":"\u12"}`, `{"a":tru}`, `{"a":nulll}`, `{'a':1}`, `{"a":1`,
	`{"a"`, `{"a":"x`, `{"choices":[{"text":"a"}`, `{"choices":[{"text":"a"]}`, `{,}`, `{"a":1 "b":2}`,
	"{\"a\":1}\x00", `{"a":-01}`, `{"a":+1}`, `{"a":1E5}`, `{"a":0.5e-3}`, `{"a":[1 2]}`, `{"a":{"b"}}`,
	`{"choices":[{"text":"a"} {"text":"b"}]}`, `{"usage":{"prompt_tokens":1,}}`, `{"choices":[{"delta":{"content":"a",}}]}`,
	// Nesting.
	`{"x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `,"choices":[{"text":"a"}]}`,
	`{"x":` + strings.Repeat(`{"a":`, 250) + "1" + strings.Repeat("}", 250) + `}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
}

func TestInspectMatchesReference(t *testing.T) {
	var all []string
	for _, c := range chunkShapes {
		all = append(all, c.data)
	}
	for _, c := range inspectCases {
		all = append(all, c.data)
	}
	all = append(all, trickyChunks...)
	for _, data := range all {
		if diff := sameAnswer([]byte(data)); diff != "" {
			t.Errorf("Inspect(%.200q): %s", data, diff)
		}
	}
}

// TestInspectFastPath checks that the engines' chunk shapes take the fast
// path and that it allocates nothing but a reported Usage.
func TestInspectFastPath(t *testing.T) {
	for _, c := range chunkShapes {
		data := []byte(c.data)
		f, ok := inspectFast(data)
		if !ok {
			t.Errorf("%s: fast path gave up", c.name)
			continue
		}
		want := 0.0
		if f.usagePresent {
			want = 1
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = Inspect(data) }); n != want {
			t.Errorf("%s: %v allocs per Inspect, want %v", c.name, n, want)
		}
	}
}

// FuzzInspectMatchesReference checks that Inspect gives the reference
// decoder's answer, error text included, on any input.
func FuzzInspectMatchesReference(f *testing.F) {
	for _, c := range chunkShapes {
		f.Add(c.data)
	}
	for _, c := range inspectCases {
		f.Add(c.data)
	}
	for _, data := range trickyChunks {
		if len(data) < 1000 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data string) {
		if diff := sameAnswer([]byte(data)); diff != "" {
			t.Fatalf("Inspect(%q): %s", data, diff)
		}
	})
}

// TestPlainWord checks the word-at-a-time test of string bytes against the
// byte table: it must never call a word plain that holds a byte the table
// marks, at any position, among plain or marked neighbours.
func TestPlainWord(t *testing.T) {
	for _, fill := range []byte{'a', 0x7f, 0xff, 0x20, 0x80, '!', '#', '[', ']'} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				plain := true
				for _, b := range w {
					plain = plain && stringPlain[b]
				}
				got := plainWord(binary.LittleEndian.Uint64(w[:]))
				if got && !plain {
					t.Fatalf("plainWord(%q) = true, want false", w)
				}
				if !got && plain {
					t.Errorf("plainWord(%q) = false on a plain word", w)
				}
			}
		}
	}
}
