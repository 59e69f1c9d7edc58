package fleet

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// The flags of TestFleet, after -args (scripts/fleet-bench sets them for
// the numbers in docs/fleet.md):
//
//	go test -count=1 -v -run TestFleet ./fleet -args -fleet-window 120s -fleet-rounds 3
var (
	flagWarmup = flag.Duration("fleet-warmup", 20*time.Second, "TestFleet: warm-up of every load, wall time")
	flagWindow = flag.Duration("fleet-window", 40*time.Second, "TestFleet: measured window of every load, wall time")
	flagRounds = flag.Int("fleet-rounds", 1, "TestFleet: rounds of each case")
	flagMin    = flag.Float64("fleet-min", 0.7, "TestFleet: the least fleet goodput, as a share of the replicas alone in the same run, that passes")
	flagCases  = flag.String("fleet-cases", "nginx,haproxy,hetero-nginx,hetero-haproxy", "TestFleet: the cases to run")
)

// SlowStep is the slower replica's engine: every step 1.25 times as long.
const SlowStep = 1.25

// fleetCase is one measurement: N replicas behind a balancer against the
// same replicas' kinds alone, all at once.
type fleetCase struct {
	name     string
	balancer string
	slow     bool // the third replica's engine is SlowStep slower
	noAgent  bool // HAProxy without the agent-check answering (its retries only)
}

// TestFleet measures a fleet of three replicas (each a simulated GB10 BF16
// engine, 10x speed, with kneecap beside it) behind real nginx and real
// HAProxy, configured as docs/fleet.md shows, against replicas alone
// in the same run: 96 closed-loop users through the balancer, 32 on each
// replica alone, users honouring Retry-After. Its goodput must reach
// -fleet-min (0.7 in CI: a bound that holds on a noisy shared 2-core
// machine; scripts/fleet-bench measures the ratio over longer windows for
// docs/fleet.md) of the sum of the replicas alone, and no request may
// be lost: every one ends in a 200 or in a 429 with Retry-After that the
// client saw after every replica refused. With the slower replica
// (hetero-*), the sum alone is two fast replicas and the slow one.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of about 65 s a case: skipped in -short")
	}
	if raceEnabled {
		t.Skip("a load test in real time: skipped under -race (CI runs it in its own step)")
	}
	cases := []fleetCase{
		{name: "nginx", balancer: "nginx"},
		{name: "haproxy", balancer: "haproxy"},
		{name: "hetero-nginx", balancer: "nginx", slow: true},
		{name: "hetero-haproxy", balancer: "haproxy", slow: true},
		// Not in CI: the agent's share, measured against hetero-haproxy.
		{name: "hetero-haproxy-noagent", balancer: "haproxy", slow: true, noAgent: true},
	}
	for _, fc := range cases {
		if !strings.Contains(","+*flagCases+",", ","+fc.name+",") {
			continue
		}
		t.Run(fc.name, func(t *testing.T) {
			lookBalancer(t, fc.balancer)
			for round := range *flagRounds {
				fc.measure(t, round)
			}
		})
	}
}

func (fc fleetCase) measure(t *testing.T, round int) {
	env := []string{}
	if fc.balancer == "haproxy" {
		env = append(env, "KNEECAP_REFUSAL_STATUS=503")
	}
	agent := fc.balancer == "haproxy" && !fc.noAgent
	seed := uint64(10 * round)
	var reps []*replica
	for i := range 3 {
		rc := replicaConfig{Profile: sim.GB10BF16, Seed: seed + uint64(i) + 1, Env: env, Agent: agent}
		if fc.slow && i == 2 {
			rc.StepFactor = SlowStep
		}
		reps = append(reps, startReplica(t, fmt.Sprintf("fleet-%d", i+1), rc))
	}
	// The replicas alone: one fast, and the slow one when there is one.
	alone := []*replica{startReplica(t, "alone-fast", replicaConfig{Profile: sim.GB10BF16, Seed: seed + 4})}
	if fc.slow {
		alone = append(alone, startReplica(t, "alone-slow", replicaConfig{Profile: sim.GB10BF16, Seed: seed + 5, StepFactor: SlowStep}))
	}
	var b *balancer
	if fc.balancer == "nginx" {
		b = startNginx(t, reps)
	} else {
		b = startHAProxy(t, reps)
	}
	loads := []load{{Name: "fleet behind " + b.name, URL: "http://" + b.addr, Users: 96, Seed: seed + 1, Warmup: *flagWarmup, Window: *flagWindow}}
	for i, r := range alone {
		loads = append(loads, load{Name: r.name, URL: "http://" + r.traffic, Users: 32, Seed: seed + uint64(i) + 2, Warmup: *flagWarmup, Window: *flagWindow})
	}
	load1 := bench.LoadAverage()
	res, err := runAll(t.Context(), loads...)
	if err != nil {
		t.Fatal(err)
	}
	// The sum of the replicas alone: two fast and the slow one, or three
	// fast.
	sum := 3 * res[1].Goodput
	if fc.slow {
		sum = 2*res[1].Goodput + res[2].Goodput
	}
	ratio := res[0].Goodput / sum
	var caps []string
	for _, r := range append(reps, alone...) {
		caps = append(caps, fmt.Sprintf("%s %d", r.name, r.state().Limit))
	}
	t.Logf("%s round %d (load average %s before, %s after):\n  %s\n  fleet / sum alone = %.3f; caps at the end: %s",
		fc.name, round+1, load1, bench.LoadAverage(), strings.Join(lines(res), "\n  "), ratio, strings.Join(caps, ", "))
	for _, r := range res {
		if r.lost() > 0 {
			t.Errorf("%s: %d requests lost (failed %v, refusals not a 429 with Retry-After %v)", r.Name, r.lost(), r.FailedSamples, r.BadRejected)
		}
	}
	if ratio < *flagMin {
		t.Errorf("%s: the fleet served %.3f of the sum of the replicas alone, under %.2f", fc.name, ratio, *flagMin)
	}
	for _, r := range append(reps, alone...) {
		r.stop(t)
	}
	b.stop(t)
}

func lines(res []result) []string {
	var out []string
	for _, r := range res {
		out = append(out, r.String())
	}
	return out
}
