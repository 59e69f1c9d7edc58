package admission

import (
	"testing"
	"testing/synctest"
	"time"
)

// The controller's view of the tenants (DecisionState): a tenant that runs
// every request it has is short below its share of the running requests,
// and bounded at it while the other tenant wants more (waiting, or refused
// and due back); one that has a request waiting or away is neither; one
// tenant alone never is. A request that ended and came back within the
// same period counts at the most the tenant ran.
func TestDecisionStateSeesATenantHeldByItsOwnDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refuse := false
		l := NewLimiter(Config{Limit: 9, MaxQueue: 10, Hooks: Hooks{Gate: gateFunc(func(Request, State) (bool, time.Duration) {
			return !refuse, 5 * time.Second
		})}})
		acquire := func(tenant string, n int) []*Ticket {
			var ts []*Ticket
			for range n {
				tk, err := l.Acquire(t.Context(), Request{Tenant: tenant})
				if err != nil {
					t.Fatalf("%s: %v", tenant, err)
				}
				ts = append(ts, tk)
			}
			return ts
		}
		check := func(what string, short, bounded bool) {
			t.Helper()
			st := l.DecisionState()
			if st.TenantShort != short || st.TenantBounded != bounded {
				t.Fatalf("%s: short %v bounded %v, want %v %v", what, st.TenantShort, st.TenantBounded, short, bounded)
			}
		}
		b := acquire("b", 4)
		check("b alone", false, false)
		a := acquire("a", 5)
		waiter := acquireAsync(t.Context(), l, Request{Tenant: "a"})
		synctest.Wait()
		check("b runs 4 of 9, a 5 and one waits", true, true)

		a[0].Release() // a's waiter takes the slot: a 5, b 4, none waits
		<-waiter
		check("none waits, nobody refused", true, false)

		b[0].Release() // b runs 3 for a moment: counted at the 4 it ran
		check("b between two requests, a 5 of 8", false, false)
		b[0] = acquire("b", 1)[0]
		b[1].Release() // and again, in the next period: it ran 4 at most
		b[1] = acquire("b", 1)[0]
		refuse = true
		if _, err := l.Acquire(t.Context(), Request{Tenant: "a"}); AsReject(err) == nil {
			t.Fatalf("a: %v, want a refusal", err)
		}
		check("a refused, due back", true, true)

		a[1].Release() // a 4 of 8: b holds its share, and is bounded
		l.SetLimit(8)
		check("b runs 4 of 8, a's refused request due back", false, true)

		if _, err := l.Acquire(t.Context(), Request{Tenant: "b"}); AsReject(err) == nil {
			t.Fatalf("b: %v, want a refusal", err)
		}
		check("b has a request away too", false, false)

		time.Sleep(10 * time.Second) // both refused requests never came back
		check("nobody is due back", false, false)
		for _, tk := range append(a[2:], b...) {
			tk.Release()
		}
	})
}
