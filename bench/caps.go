package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// CapSample is the gateway's cap at one moment.
type CapSample struct {
	At  time.Time
	Cap int
}

// pollCap reads Config.CapURL once a second until ctx ends.
func (r *levelRun) pollCap(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if c, ok := r.readCap(ctx); ok {
			r.mu.Lock()
			r.caps = append(r.caps, CapSample{At: time.Now(), Cap: c})
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *levelRun) readCap(ctx context.Context) (int, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.CapURL, nil)
	if err != nil {
		return 0, false
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var st struct {
		Limit *int `json:"limit"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st) != nil || st.Limit == nil {
		return 0, false
	}
	return *st.Limit, true
}
