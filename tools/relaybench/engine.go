package main

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request headers by which the load client tells the engine what to stream.
// Every relay under test forwards them unchanged.
const (
	hdrChunks   = "X-Relaybench-Chunks"   // number of output chunks
	hdrInterval = "X-Relaybench-Interval" // gap between chunks (Go duration); 0 = as fast as possible
)

// chunkBytes is one output chunk as vLLM frames it (about 200 bytes): a
// chat.completion.chunk carrying one token of content.
var chunkBytes = []byte(`data: {"id":"chatcmpl-relaybench","object":"chat.completion.chunk","created":1764460800,"model":"relaybench","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}` + "\n\n")

// finishBytes ends the stream: the finish chunk, the usage-only chunk that
// stream_options.include_usage asks for, and the [DONE] terminator.
var finishBytes = []byte(`data: {"id":"chatcmpl-relaybench","object":"chat.completion.chunk","created":1764460800,"model":"relaybench","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}` + "\n\n")

var doneBytes = []byte("data: [DONE]\n\n")

// engineHandler is a minimal OpenAI-compatible streaming engine: it reads the
// whole request (so relays never race a response against an unread body,
// golang/go#40747), sends headers, then the first chunk at once and the rest
// on an absolute schedule (paced) or back to back (unpaced), flushing each
// chunk as a real engine does. It does no work per chunk beyond the write, so
// that relays, not the engine, dominate the cost being measured.
func engineHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"relaybench","object":"model"}]}`)
	})
	stream := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n, _ := strconv.Atoi(r.Header.Get(hdrChunks))
		if n <= 0 {
			n = 1
		}
		interval, _ := time.ParseDuration(r.Header.Get(hdrInterval))
		usage := bytes.Contains(body, []byte(`"include_usage":true`))
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			whole(w, r, n, interval)
			return
		}

		rc := http.NewResponseController(w)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if rc.Flush() != nil {
			return
		}
		start := time.Now()
		for i := range n {
			if interval > 0 && i > 0 {
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-r.Context().Done():
						t.Stop()
						return
					}
				}
			}
			if _, err := w.Write(chunkBytes); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		w.Write(finishBytes)
		if usage {
			io.WriteString(w, `data: {"id":"chatcmpl-relaybench","object":"chat.completion.chunk","created":1764460800,"model":"relaybench","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":`+strconv.Itoa(n)+`,"total_tokens":`+strconv.Itoa(n+1)+`}}`+"\n\n")
		}
		w.Write(doneBytes)
	}
	mux.HandleFunc("POST /v1/chat/completions", stream)
	mux.HandleFunc("POST /v1/completions", stream)
	return mux
}

// whole answers a request that is not streamed as an engine does: after
// the whole generation (n tokens, paced as a stream's), one JSON body, the
// answer the stream of the same request adds up to.
func whole(w http.ResponseWriter, r *http.Request, n int, interval time.Duration) {
	if interval > 0 && n > 1 {
		t := time.NewTimer(time.Duration(n-1) * interval)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"chatcmpl-relaybench","object":"chat.completion","created":1764460800,"model":"relaybench","choices":[{"index":0,"message":{"role":"assistant","content":"`+
		strings.Repeat(" tok", n)+`"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":`+
		strconv.Itoa(n)+`,"total_tokens":`+strconv.Itoa(n+1)+`}}`)
}
