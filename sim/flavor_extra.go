package sim

import "strconv"

// This file encodes what a vllm-flavoured answer carries when its request
// asks for it: logprobs and a tool call, in each chunk and in the answer
// that is not streamed, by appending bytes as the rest of the chunker.

// wordsLen is the length of all of words, for text offsets.
var wordsLen = func() int {
	n := 0
	for _, w := range words {
		n += len(w)
	}
	return n
}()

// textOffset is where token i starts in the answer's text.
func textOffset(i int) int {
	off := i / len(words) * wordsLen
	for j := 0; j < i%len(words); j++ {
		off += len(words[j])
	}
	return off
}

// logprob is the simulated logprob of the j-th most likely token at
// output position i: fixed, as the text is.
func appendLogprob(dst []byte, i, j int) []byte {
	return strconv.AppendFloat(dst, -0.25*float64(j+1)-0.01*float64(i%7), 'f', 2, 64)
}

func appendBytes(dst []byte, w string) []byte {
	dst = append(dst, '[')
	for k := 0; k < len(w); k++ {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(w[k]), 10)
	}
	return append(dst, ']')
}

// appendLogprobs appends the logprobs of tokens [from, to) as vLLM's chat
// ({"content": [...]}) or completion API (four lists) gives them, or null
// when the request asked for none or there are no tokens.
func (c *chunker) appendLogprobs(dst []byte, from, to int) []byte {
	if c.lp < 0 || from >= to {
		return append(dst, "null"...)
	}
	if c.chat {
		dst = append(dst, `{"content":[`...)
		for i := from; i < to; i++ {
			if i > from {
				dst = append(dst, ',')
			}
			dst = c.appendChatLogprob(dst, i, 0)
			dst = append(dst[:len(dst)-1], `,"top_logprobs":[`...)
			for j := range c.lp {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = c.appendChatLogprob(dst, i, j)
			}
			dst = append(dst, "]}"...)
		}
		return append(dst, "]}"...)
	}
	dst = append(dst, `{"text_offset":[`...)
	for i := from; i < to; i++ {
		if i > from {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(textOffset(i)), 10)
	}
	dst = append(dst, `],"token_logprobs":[`...)
	for i := from; i < to; i++ {
		if i > from {
			dst = append(dst, ',')
		}
		dst = appendLogprob(dst, i, 0)
	}
	dst = append(dst, `],"tokens":[`...)
	for i := from; i < to; i++ {
		if i > from {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, words[i%len(words)]...)
		dst = append(dst, '"')
	}
	dst = append(dst, `],"top_logprobs":[`...)
	for i := from; i < to; i++ {
		if i > from {
			dst = append(dst, ',')
		}
		if c.lp == 0 {
			dst = append(dst, "null"...)
			continue
		}
		dst = append(dst, '{')
		for j := range c.lp {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '"')
			dst = append(dst, words[(i+j)%len(words)]...)
			dst = append(dst, `":`...)
			dst = appendLogprob(dst, i, j)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// appendChatLogprob appends {"token", "logprob", "bytes"} of the j-th
// most likely token at position i.
func (c *chunker) appendChatLogprob(dst []byte, i, j int) []byte {
	w := words[(i+j)%len(words)]
	dst = append(dst, `{"token":"`...)
	dst = append(dst, w...)
	dst = append(dst, `","logprob":`...)
	dst = appendLogprob(dst, i, j)
	dst = append(dst, `,"bytes":`...)
	dst = appendBytes(dst, w)
	return append(dst, '}')
}

// appendToolID appends the id of the answer's tool call.
func (c *chunker) appendToolID(dst []byte) []byte {
	dst = append(dst, "chatcmpl-tool-"...)
	return append(dst, c.id...)
}

// appendArgs appends, JSON-escaped, what tokens [from, to) add to the
// tool call's arguments: {"text": " the quick ..."}.
func (c *chunker) appendArgs(dst []byte, from, to int) []byte {
	for i := from; i < to; i++ {
		if i == 0 {
			dst = append(dst, `{\"text\": \"`...)
		}
		dst = append(dst, words[i%len(words)]...)
		if i == c.total-1 {
			dst = append(dst, `\"}`...)
		}
	}
	return dst
}
