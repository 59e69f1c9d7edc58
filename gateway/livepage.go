package gateway

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the page's files
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kneecap/kneecap/wire"
)

// The live page on the admin port: GET / is one page that draws what
// /status shows (the controller's curve, the cap and why it moved, the
// token budget, classes and tenants) and the last ten minutes of it from
// /live/history (livehistory.go). It polls both from the browser; the
// gateway serves files embedded in the binary and reads nothing per
// request or per chunk for it.
//
// It is read-only and shows nothing the admin port does not already
// serve: every number comes from /status or its samples. Its responses
// carry a Content-Security-Policy that allows scripts, styles, images and
// fetches from the admin port itself only (no inline script), nosniff, no
// framing and no referrer; no query parameter is ever written into a
// response (the history's since is read as a number, anything else
// ignored).

var (
	//go:embed page/index.html
	pageHTML []byte
	//go:embed page/page.js
	pageJS []byte
	//go:embed page/page.css
	pageCSS []byte
)

// pageIcon is the page's icon. It is here rather than in page/:
// .dockerignore keeps *.svg files out of the image's build context.
const pageIcon = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#1d4ed8"/><path d="M5 26 C10 8 14 7 18 8 L27 8" fill="none" stroke="#fff" stroke-width="3"/><line x1="18" y1="5" x2="18" y2="27" stroke="#fbbf24" stroke-width="2.5"/></svg>`

// livePageCSP is the Content-Security-Policy of every response of the
// page.
const livePageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// pageAsset is one embedded file as served: its bytes, type and ETag.
type pageAsset struct {
	body        []byte
	contentType string
	etag        string
}

// livePageFiles maps the page's paths to their embedded files.
var livePageFiles = []struct {
	path, contentType string
	body              []byte
}{
	{"/", "text/html; charset=utf-8", pageHTML},
	{"/live/page.js", "text/javascript; charset=utf-8", pageJS},
	{"/live/page.css", "text/css; charset=utf-8", pageCSS},
	{"/live/icon.svg", "image/svg+xml", []byte(pageIcon)},
}

// routeLivePage adds the page, its files and /live/history to the admin
// router, for GET and HEAD; chi answers other methods with 405.
func (g *Gateway) routeLivePage(r chi.Router) {
	for _, f := range livePageFiles {
		sum := sha256.Sum256(f.body)
		a := &pageAsset{body: f.body, contentType: f.contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		r.Get(f.path, a.serve)
		r.Head(f.path, a.serve)
	}
	r.Get("/live/history", g.serveHistory)
	r.Head("/live/history", g.serveHistory)
}

// livePageHeaders sets the headers every response of the page carries.
func livePageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", livePageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// serve answers with the file; ServeContent handles HEAD, If-None-Match
// and ranges. Browsers revalidate it (no-cache), so a new gateway's page
// is never mixed with an old script.
func (a *pageAsset) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	livePageHeaders(h)
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// serveHistory answers with the history's samples (HistoryJSON): those
// from the sequence number since= on, when it is one the history still
// keeps, else all of them.
func (g *Gateway) serveHistory(w http.ResponseWriter, r *http.Request) {
	since := int64(-1)
	if v, err := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64); err == nil {
		since = v
	}
	body, err := json.Marshal(g.history.Snapshot(since))
	if err != nil { // control.Float encodes every value: not expected
		g.log.Error("cannot encode the live page's history", "err", err)
		wire.WriteError(w, http.StatusInternalServerError, wire.TypeServer, "history_encoding",
			"the gateway could not encode its history: "+err.Error())
		return
	}
	h := w.Header()
	livePageHeaders(h)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
