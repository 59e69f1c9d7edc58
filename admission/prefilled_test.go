package admission

import (
	"testing"
	"testing/synctest"
	"time"
)

// Three prompts granted at once and prefilled in one batch: the first two
// are told the tokens of those granted after them whose first token came
// with theirs, whatever order the gateway saw the first tokens in; a
// request whose first token is not seen is no one's batch-mate.
func TestPrefillWith(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(Config{Limit: 8, MaxQueue: 10})
		l.SetCosts(testCosts)
		ctx := t.Context()
		var tk []*Ticket
		for _, p := range []int{100, 200, 300, 400} {
			x, err := l.Acquire(ctx, tokenRequest(p, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tk = append(tk, x)
		}
		if !l.PrefillDuring(time.Now()) {
			t.Fatal("PrefillDuring: false with four prefills under way")
		}
		time.Sleep(600 * time.Millisecond)
		tk[3].NoFirstToken() // not streamed: when it was prefilled is not known
		tk[1].FirstToken()   // the batch's first tokens, seen out of grant order
		tk[0].FirstToken()
		tk[2].FirstToken()
		for i, want := range []int{200 + 300, 300, 0, 0} {
			if got := tk[i].PrefillWith(); got != want {
				t.Errorf("request %d: PrefillWith %d, want %d", i, got, want)
			}
		}
		if !l.PrefillDuring(time.Now()) || l.PrefillDuring(time.Now().Add(time.Nanosecond)) {
			t.Error("PrefillDuring: want true from the last first token on, false after it with none under way")
		}
		time.Sleep(time.Second) // a later prompt, alone: no batch-mate of theirs
		late, err := l.Acquire(ctx, tokenRequest(500, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		late.FirstToken()
		if got := tk[0].PrefillWith(); got != 500 {
			t.Errorf("after a later prompt alone: PrefillWith %d, want still 500", got)
		}
		for _, x := range append(tk, late) {
			x.Release()
		}
	})
}
