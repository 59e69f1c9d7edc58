package proxy

import (
	"io"

	"golang.org/x/sync/semaphore"
)

// bodyBudget bounds the request body bytes held at once across every
// request being read, queued or running. A request takes its bytes as they
// arrive (all of a declared Content-Length at once, before reading any)
// and gives them back when it ends.
type bodyBudget struct{ sem *semaphore.Weighted }

func newBodyBudget(total int64) *bodyBudget { return &bodyBudget{sem: semaphore.NewWeighted(total)} }

// heldBody reads a request body, taking budget for every byte before it
// is kept. It belongs to the goroutine serving the request.
type heldBody struct {
	r      io.Reader
	b      *bodyBudget
	held   int64 // bytes taken from the budget
	read   int64
	refuse bool // the declared length did not fit
}

// reader wraps r; declared is the Content-Length (-1 when unknown).
func (b *bodyBudget) reader(r io.Reader, declared int64) *heldBody {
	h := &heldBody{r: r, b: b}
	if declared > 0 {
		if !b.sem.TryAcquire(declared) {
			h.refuse = true
		} else {
			h.held = declared
		}
	}
	return h
}

func (h *heldBody) Read(p []byte) (int, error) {
	if h.refuse {
		return 0, errBodyBudget
	}
	n, err := h.r.Read(p)
	h.read += int64(n)
	if need := h.read - h.held; need > 0 {
		if !h.b.sem.TryAcquire(need) {
			h.refuse = true
			return 0, errBodyBudget
		}
		h.held += need
	}
	return n, err
}

// release gives the bytes back; it may be called once.
func (h *heldBody) release() {
	if h.held > 0 {
		h.b.sem.Release(h.held)
		h.held = 0
	}
}
