package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/kneecap/kneecap/sim"
)

// Scenario29 is a fresh replica joining a loaded fleet: two datacenter
// replicas (sim.H1008B, DatacenterWorkload, targets 1 s / 50 ms) start cold
// under open-loop arrivals at three times DCKnee (1.5 times their knee,
// the load an autoscaler adds a replica for); at JoinAt a third joins, a
// cold engine behind a gateway that starts from the fleet's state file
// (SharedState: what its siblings learnt on the same engine and targets),
// and the fleet is measured for the minute after. The balancer sends each
// request to the replica with the fewest in flight and retries a refusal
// on another (scaling_fleet.go).
var Scenario29 = Scaling{
	Profile: sim.H1008B, Workload: DatacenterWorkload, TPOT: 50 * time.Millisecond,
	Rate: 3 * DCKnee, Phases: [3]time.Duration{100 * time.Second}, HPA: DefaultHPA,
	Fixed: 2, JoinAt: 40 * time.Second, SharedState: true,
}

// Scenario29Cold is scenario 29 without the shared state file: the new
// replica's gateway starts cold, at cap 1 (printed for comparison).
var Scenario29Cold = func() Scaling { s := Scenario29; s.SharedState = false; return s }()

// JoinOracleCaps are the static caps of scenario 29's oracle fleets (every
// replica at the one cap, the same arrivals and join): 23's oracle cap and
// the open loop's (27).
var JoinOracleCaps = []int{208}

// joiner is the name of the replica that joins scenario s's fleet.
func (s Scaling) joiner() string { return fmt.Sprintf("replica-%d", s.Fixed+1) }

// JoinReport judges scenario 29 (s) from its adaptive fleet's run and the
// oracle fleets' runs by cap: the best of these is the oracle, and the new
// replica's share of it is its goodput after the join over the fleet's
// size. The checks, as the datacenter scenarios': the new replica's first
// DCWindow at 0.9 x its share begins within DCReach of its joining; after
// the join the fleet serves >= 0.97 x the oracle's goodput and loses
// (refused or failed) at most 5 % more requests than it. cold, when it
// has run (ByReplica set), is the same fleet with a cold joiner, printed.
func JoinReport(s Scaling, auto, cold ScalingResult, oracles map[int]ScalingResult) ([]Check, string) {
	end := s.Phases[0] + s.Phases[1] + s.Phases[2]
	bestCap, best := 0, -1.0
	for c, r := range oracles {
		if g := r.GoodputBetween(s.JoinAt, end); g > best || (g == best && c < bestCap) {
			bestCap, best = c, g
		}
	}
	or := oracles[bestCap]
	share := best / float64(s.Fixed+1)
	name := s.joiner()
	reach := reachAfter(auto.ByReplica[name], 0.9*share, s.JoinAt, end, DCWindow)
	var b strings.Builder
	fmt.Fprintf(&b, "oracle: static cap %d, %.3f good req/s after the join (%.3f a replica); adaptive %.3f; the new replica's good requests per %v from its joining, adaptive / oracle:",
		bestCap, best, share, auto.GoodputBetween(s.JoinAt, end), DCWindow)
	for at := s.JoinAt; at < end; at += DCWindow {
		fmt.Fprintf(&b, " %d/%d", goodIn(auto.ByReplica[name], at, DCWindow), goodIn(or.ByReplica[name], at, DCWindow))
	}
	fmt.Fprintf(&b, "; the fleet's good requests and lost ones per %v from the start, adaptive / oracle:", DCWindow)
	for at := time.Duration(0); at < end; at += DCWindow {
		fmt.Fprintf(&b, " %d/%d (%d/%d)", goodIn(auto.Good, at, DCWindow), goodIn(or.Good, at, DCWindow), goodIn(auto.Lost, at, DCWindow), goodIn(or.Lost, at, DCWindow))
	}
	if cold.ByReplica != nil {
		fmt.Fprintf(&b, "; a cold joiner instead: %.3f after the join, the new replica's good requests per %v:", cold.GoodputBetween(s.JoinAt, end), DCWindow)
		for at := s.JoinAt; at < end; at += DCWindow {
			fmt.Fprintf(&b, " %d", goodIn(cold.ByReplica[name], at, DCWindow))
		}
		fmt.Fprintf(&b, ", the fleet's good and lost per %v from the join:", DCWindow)
		for at := s.JoinAt; at < end; at += DCWindow {
			fmt.Fprintf(&b, " %d (%d)", goodIn(cold.Good, at, DCWindow), goodIn(cold.Lost, at, DCWindow))
		}
		ca := goodIn(cold.Arrived, s.JoinAt, end-s.JoinAt)
		fmt.Fprintf(&b, ", good of those arrived after it %d, lost %d", ca, countFrom(cold.Lost, s.JoinAt))
	}
	for c, r := range oracles {
		fmt.Fprintf(&b, "; static cap %d: %.3f after the join", c, r.GoodputBetween(s.JoinAt, end))
	}
	lost := func(r ScalingResult) int { return countFrom(r.Lost, s.JoinAt) }
	var checks []Check
	add := func(ok bool, format string, args ...any) {
		checks = append(checks, Check{What: fmt.Sprintf(format, args...), OK: ok})
	}
	add(reach >= 0 && reach <= DCReach, "the new replica: a %v window at 0.9 x its share of the oracle (%.2f req/s) starts within %v of its joining (%.0fs)", DCWindow, share, DCReach, reach.Seconds())
	a, o := goodIn(auto.Arrived, s.JoinAt, end-s.JoinAt), goodIn(or.Arrived, s.JoinAt, end-s.JoinAt)
	add(float64(a) >= 0.97*float64(o), "the fleet after the join: good requests of those that arrived after it >= 0.97 x the oracle's (%d vs %d, %.3f)", a, o, over(float64(a), float64(o)))
	a, o = lost(auto), lost(or)
	add(float64(a) <= 1.05*float64(o)+1, "lost requests after the join (refused or failed) at most 5 %% more than the oracle's (%d vs %d)", a, o)
	markNotMet(29, checks)
	return checks, b.String()
}

// countFrom is the number of instants in ts at or after from.
func countFrom(ts []time.Duration, from time.Duration) (n int) {
	for _, at := range ts {
		if at >= from {
			n++
		}
	}
	return n
}
