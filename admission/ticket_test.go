package admission

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestTicketGrant: a ticket tells what the limiter knew at its grant (the
// cap, the slots held with it, why it waited, the token budget's
// predictions once it knows the engine's costs), after its release too.
func TestTicketGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 2, MaxQueue: 4})
		ctx := t.Context()
		a, _ := l.Acquire(ctx, Request{})
		if g := a.Grant(); g != (Grant{Limit: 2, Running: 1}) {
			t.Errorf("granted at once: %+v", g)
		}
		l.SetCosts(Costs{PrefillBase: 10 * time.Millisecond, PrefillPerToken: 0.001, StepBase: 20 * time.Millisecond})
		b, _ := l.Acquire(ctx, Request{PromptTokens: 100})
		if g := b.Grant(); g.Running != 2 || g.EngineTTFT <= 0 || g.Step != 20*time.Millisecond || g.Held != 0 {
			t.Errorf("second: %+v", g)
		}
		w := acquireAsync(ctx, l, Request{})
		synctest.Wait()
		time.Sleep(time.Second)
		a.Release()
		r := <-w
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.t.Release()
		if g := r.t.Grant(); g.Held.String() != "cap" || g.Running != 2 || g.Limit != 2 {
			t.Errorf("waiter: %+v (held %q)", g, g.Held)
		}
		b.Release()
	})
	if s := (HoldReasons(0)).String(); s != "" {
		t.Errorf("no reason: %q", s)
	}
	if s := HoldReasons(1<<heldCount | 1<<heldStep).String(); s != "cap,step" {
		t.Errorf("two reasons: %q", s)
	}
}
