package faults

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/testengine"
)

// TestClassesOnRealEngines runs priority classes and tenants in front of
// each engine stack, with one slot held by a chat stream: a batch request
// leaves the queue at its class's wait (429 queue_timeout, never reaching
// the engine); hostile tenant headers are refused (400, OpenAI-shaped)
// before they queue; a request naming an unknown class queues in the
// default class and, when its client leaves, leaves the queue; the chat
// stream finishes whole and the engine sees only it.
func TestClassesOnRealEngines(t *testing.T) {
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			eng := testengine.Start(t, kind)
			h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=1", "KNEECAP_SLO_TTFT=60s", "KNEECAP_SLO_TPOT=1s",
				"KNEECAP_CLASSES=chat;batch:ttft=0,tpot=0,wait=300ms", "KNEECAP_DEFAULT_CLASS=chat", "KNEECAP_TENANT_HEADER=x-team")
			before, _ := eng.Stats(t)
			ctx := context.Background()

			var long sync.WaitGroup
			var chat seen
			long.Go(func() {
				s, err := request(ctx, http.DefaultClient, h.traffic, true, 150, testengine.HeaderGap, "20", "X-Team", "a")
				if err != nil {
					s.body = err.Error()
				}
				chat = s
			})
			waitUntil(t, 10*time.Second, "the chat stream running", func() bool { return h.g.Limiter().State().Running == 1 })

			start := time.Now()
			s, err := request(ctx, http.DefaultClient, h.traffic, true, 4, "X-Kneecap-Class", "batch", "X-Team", "b")
			if took := time.Since(start); err != nil || s.status != http.StatusTooManyRequests || s.errCode != "queue_timeout" || took < 300*time.Millisecond {
				t.Errorf("batch behind the held slot: %v, %s after %v; want 429 queue_timeout after at least its class's wait (300ms)", err, s, took)
			}

			for _, team := range []string{strings.Repeat("t", 65), "a b", "key:0123456789abcdef"} {
				s, err := request(ctx, http.DefaultClient, h.traffic, true, 4, "X-Team", team)
				if err != nil || s.status != http.StatusBadRequest || s.errType == "" {
					t.Errorf("tenant header %q: %v, %s; want 400 with an OpenAI-shaped error", team, err, s)
				}
			}

			leave, cancel := context.WithCancel(ctx)
			left := make(chan error, 1)
			go func() {
				_, err := request(leave, http.DefaultClient, h.traffic, true, 4, "X-Kneecap-Class", "root")
				left <- err
			}()
			waitUntil(t, 10*time.Second, "the unknown class queued in the default class", func() bool {
				cs := h.g.Limiter().Classes()
				return cs[0].Name == "chat" && cs[0].Queued == 1
			})
			cancel()
			if err := <-left; err == nil {
				t.Error("a queued request whose client left got an answer")
			}
			waitUntil(t, 5*time.Second, "the queue emptied", func() bool { return h.g.Limiter().State().Queued == 0 })

			long.Wait()
			if !chat.complete {
				t.Errorf("the chat stream holding the slot: %s", chat)
			}
			if after, _ := eng.Stats(t); after != before+1 {
				t.Errorf("the engine got %d requests, want 1 (the chat stream): a refused or departed request reached it", after-before)
			}
			if cs := h.g.Limiter().Classes(); cs[1].Granted != 0 {
				t.Errorf("batch was granted %d slots, want 0", cs[1].Granted)
			}
			settle(t, h, eng)
		})
	}
}
