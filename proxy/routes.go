package proxy

import (
	"net/http"
	"path"
	"strings"

	"github.com/kneecap/kneecap/wire"
)

// Access is what the gateway does with a request to one engine path.
type Access uint8

// Accesses.
const (
	// Closed paths get an OpenAI-shaped 404 and never reach the engine:
	// every path not in the table (engine admin routes among them) unless
	// the operator opened it.
	Closed Access = iota
	// Generation paths are admitted (a slot, the queue, refusals),
	// measured and judged.
	Generation
	// Admitted paths cost engine time but stream no tokens (embeddings,
	// rerank, score, pooling, transcription): admitted like a generation
	// request and relayed, not measured.
	Admitted
	// ReadOnly paths are relayed as they are: the engine's model list,
	// health, metrics, version and tokenizer.
	ReadOnly
)

// Route is the gateway's policy for one path: what it does with it, on
// which methods, and for a generation route the label of its records, the
// shape of its body and stream, and whether a request that is not
// streamed is reassembled.
type Route struct {
	Path    string
	Access  Access
	Methods []string // allowed methods; others get 405
	Name    string   // the "route" label of records and metrics (generation only)
	Shape   wire.Shape
	// Reassemble: a request that is not streamed is sent to the engine as
	// a stream with usage, measured like one, and answered with the body
	// the engine would have sent whole (wire.AsStream, wire.Assembler),
	// unless one of its fields keeps it whole (wire.WholeOnly). Routes
	// without it relay such a request whole and learn its cost from its
	// end-to-end time and usage. See docs/gateway.md.
	Reassemble bool
}

// Routes is the routing policy: every generation route of vLLM, SGLang and
// llama.cpp's server, the engine-time routes without tokens, and the
// read-only routes. Paths are matched after decoding and cleaning (see
// CanonicalPath), and the engine is sent the canonical path, so what is
// matched is what the engine routes. The table is in docs/gateway.md.
var Routes = []Route{
	// OpenAI-compatible generation (all three engines; llama.cpp also
	// without /v1).
	{Path: "/v1/chat/completions", Access: Generation, Methods: methodsPost, Name: "chat", Shape: wire.ShapeOpenAI, Reassemble: true},
	{Path: "/chat/completions", Access: Generation, Methods: methodsPost, Name: "chat", Shape: wire.ShapeOpenAI, Reassemble: true},
	{Path: "/v1/completions", Access: Generation, Methods: methodsPost, Name: "completions", Shape: wire.ShapeOpenAI, Reassemble: true},
	{Path: "/completions", Access: Generation, Methods: methodsPost, Name: "completion", Shape: wire.ShapeLlamaCpp}, // llama.cpp: its native shape
	// The routes below relay a request that is not streamed whole (see
	// Route.Reassemble and docs/gateway.md for why, route by route).
	// vLLM's Responses API: typed stream events.
	{Path: "/v1/responses", Access: Generation, Methods: methodsPost, Name: "responses", Shape: wire.ShapeResponses},
	// llama.cpp's native completion and infill.
	{Path: "/completion", Access: Generation, Methods: methodsPost, Name: "completion", Shape: wire.ShapeLlamaCpp},
	{Path: "/infill", Access: Generation, Methods: methodsPost, Name: "completion", Shape: wire.ShapeLlamaCpp},
	// SGLang's native generation.
	{Path: "/generate", Access: Generation, Methods: methodsPost, Name: "generate", Shape: wire.ShapeSGLang},

	// Engine time without a token stream.
	{Path: "/v1/embeddings", Access: Admitted, Methods: methodsPost},
	{Path: "/embeddings", Access: Admitted, Methods: methodsPost},
	{Path: "/embedding", Access: Admitted, Methods: methodsPost},
	{Path: "/v1/rerank", Access: Admitted, Methods: methodsPost},
	{Path: "/v2/rerank", Access: Admitted, Methods: methodsPost},
	{Path: "/rerank", Access: Admitted, Methods: methodsPost},
	{Path: "/reranking", Access: Admitted, Methods: methodsPost},
	{Path: "/v1/score", Access: Admitted, Methods: methodsPost},
	{Path: "/score", Access: Admitted, Methods: methodsPost},
	{Path: "/pooling", Access: Admitted, Methods: methodsPost},
	{Path: "/classify", Access: Admitted, Methods: methodsPost},
	{Path: "/v1/audio/transcriptions", Access: Admitted, Methods: methodsPost},
	{Path: "/v1/audio/translations", Access: Admitted, Methods: methodsPost},

	// Read-only.
	{Path: "/v1/models", Access: ReadOnly, Methods: methodsGet},
	{Path: "/models", Access: ReadOnly, Methods: methodsGet},
	{Path: "/health", Access: ReadOnly, Methods: methodsGet},
	{Path: "/metrics", Access: ReadOnly, Methods: methodsGet},
	{Path: "/version", Access: ReadOnly, Methods: methodsGet},
	{Path: "/ping", Access: ReadOnly, Methods: methodsGet},
	{Path: "/get_model_info", Access: ReadOnly, Methods: methodsGet},
	{Path: "/get_server_info", Access: ReadOnly, Methods: methodsGet},
	{Path: "/props", Access: ReadOnly, Methods: methodsGet}, // POST /props changes the server: closed
	{Path: "/tokenize", Access: ReadOnly, Methods: methodsPost},
	{Path: "/detokenize", Access: ReadOnly, Methods: methodsPost},
}

var (
	methodsPost = []string{http.MethodPost}
	methodsGet  = []string{http.MethodGet, http.MethodHead}
)

// CanonicalPath is the path the gateway matches and forwards: decoded (as
// net/http decodes URL.Path: "%63" is "c"), cleaned (no "." or ".."
// segments, no doubled or trailing slashes), rooted. The engines route on
// the decoded path too, and the gateway sends them this form, so a
// percent-encoded, doubled or trailing-slash variant of a route is that
// route.
func CanonicalPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] == '/' {
		return path.Clean(p) // a clean path comes back as it is, not copied
	}
	return path.Clean("/" + p)
}

// router finds the route of a canonical path.
type router struct {
	exact    map[string]Route
	prefixes []Route // each Path matches itself and every path below it
}

func newRouter(passthrough []string) *router {
	r := &router{exact: make(map[string]Route, len(Routes)+len(passthrough))}
	for _, rt := range Routes {
		r.exact[rt.Path] = rt
	}
	r.prefixes = []Route{{Path: "/v1/models", Access: ReadOnly, Methods: methodsGet}} // /v1/models/{id}
	for _, p := range passthrough {
		open := Route{Access: ReadOnly} // any method; never admitted
		if base, ok := strings.CutSuffix(p, "*"); ok {
			open.Path = CanonicalPath(base)
			r.prefixes = append(r.prefixes, open)
		} else if _, inTable := r.exact[p]; !inTable { // the table keeps its policy
			open.Path = p
			r.exact[p] = open
		}
	}
	return r
}

// match returns the route of the canonical path p: the table's, else the
// first prefix's (the read-only model paths, then the operator's).
func (r *router) match(p string) (Route, bool) {
	if rt, ok := r.exact[p]; ok {
		return rt, true
	}
	for _, rt := range r.prefixes {
		if p == rt.Path || strings.HasPrefix(p, rt.Path+"/") {
			rt.Path = p
			return rt, true
		}
	}
	return Route{}, false
}

func (rt Route) allows(method string) bool {
	if rt.Methods == nil {
		return true
	}
	for _, m := range rt.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// ValidPassthroughPath reports whether p is usable as an operator's
// passthrough path: absolute, and already canonical (with an optional
// trailing "*").
func ValidPassthroughPath(p string) bool {
	q := strings.TrimSuffix(p, "*")
	if strings.HasSuffix(p, "*") && strings.HasSuffix(q, "/") && len(q) > 1 {
		q = strings.TrimSuffix(q, "/")
	}
	return strings.HasPrefix(q, "/") && CanonicalPath(q) == q && q != "/"
}
