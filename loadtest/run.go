package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/bench"
)

// The load: 16 closed-loop users (4 for the engine alone), targets
// TTFT 500 ms and TPOT 25 ms.
const (
	Users      = 16
	AloneUsers = 4
)

// Targets are the users' targets and the gateway's.
var Targets = bench.Targets{TTFT: 500 * time.Millisecond, TPOT: 25 * time.Millisecond}

// Mode is how the engine is fronted.
type Mode struct {
	// Alone sends AloneUsers users straight to the engine, no gateway.
	Alone bool
	// Cap is a static cap (KNEECAP_MAX_CONCURRENCY); zero is adaptive.
	Cap int
	// NoBudget turns the token budget off (KNEECAP_TOKEN_BUDGET=false).
	NoBudget bool
}

// Modes are the issue's: the engine alone with 4 users, adaptive, static
// caps 2 to 5, and static cap 3 without the token budget.
var Modes = []Mode{{Alone: true}, {}, {Cap: 2}, {Cap: 3}, {Cap: 4}, {Cap: 5}, {Cap: 3, NoBudget: true}}

func (m Mode) String() string {
	switch {
	case m.Alone:
		return "engine alone, " + strconv.Itoa(AloneUsers) + " users"
	case m.Cap == 0:
		return "adaptive"
	case m.NoBudget:
		return "static " + strconv.Itoa(m.Cap) + ", no token budget"
	}
	return "static " + strconv.Itoa(m.Cap)
}

// env is the gateway's settings beside the upstream and the targets.
func (m Mode) env() []string {
	var env []string
	if m.Cap > 0 {
		env = append(env, "KNEECAP_MAX_CONCURRENCY="+strconv.Itoa(m.Cap))
	}
	if m.NoBudget {
		env = append(env, "KNEECAP_TOKEN_BUDGET=false")
	}
	return env
}

// Clients is what the users do with a refusal.
type Clients struct {
	Name          string
	Clients       bench.Clients
	RetryAfterMax time.Duration
}

// The two client policies: the users, who honour Retry-After up
// to 5 s and then send their next request, and the OpenAI SDKs' two
// retries of the same request.
var (
	RetryAfter5s = Clients{Name: "retry-after<=5s", Clients: bench.ClientsNext, RetryAfterMax: 5 * time.Second}
	SDK          = Clients{Name: "sdk", Clients: bench.ClientsSDK}
)

// Case is one run: a fresh engine, a fresh gateway (unless Mode.Alone) and
// the users, for Warmup and then the measured Window, in real time over
// TCP on 127.0.0.1.
type Case struct {
	Stack          Stack
	Mode           Mode
	Clients        Clients
	Warmup, Window time.Duration
	Seed           uint64
}

func (c Case) String() string {
	if c.Mode.Alone {
		return fmt.Sprintf("%s / %s", c.Stack, c.Mode)
	}
	return fmt.Sprintf("%s / %s / %s", c.Stack, c.Mode, c.Clients.Name)
}

// Run runs the case and returns what it measured, with every check that
// failed in Result.Problems. An error is a run that could not be made (an
// engine that would not start), not a check that failed.
func (c Case) Run(ctx context.Context) (res Result, err error) {
	started := time.Now()
	res = Result{Stack: c.Stack, Mode: c.Mode.String(), Clients: c.Clients.Name, Cap: c.Mode.Cap}
	if c.Mode.Alone {
		res.Clients = "-"
	}
	eng, err := startEngine(c.Stack)
	if err != nil {
		return res, fmt.Errorf("%s: %w", c, err)
	}
	defer eng.stop()
	base, users := eng.url, Users
	var fe *frontend
	var smp *sampler
	if c.Mode.Alone {
		users = AloneUsers
	} else {
		if fe, err = startGateway(eng.url, c.Mode); err != nil {
			return res, fmt.Errorf("%s: %w", c, err)
		}
		defer func() { // res is the named result: the problem is reported
			if err := fe.stop(); err != nil {
				res.problem("gateway: %v", err)
			}
		}()
		base = fe.traffic
		smp = fe.startSampling()
		defer smp.finish()
	}

	tr := &http.Transport{Proxy: nil, MaxIdleConns: 2 * users, MaxIdleConnsPerHost: 2 * users, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	defer tr.CloseIdleConnections()
	rep, err := bench.Run(ctx, bench.Config{
		BaseURL: base, Model: eng.model, Client: &http.Client{Transport: tr},
		Levels: []float64{float64(users)}, Warmup: c.Warmup, Duration: c.Window,
		Timeout: c.Warmup + c.Window + time.Minute, RequestTimeout: time.Minute,
		Workload: Workload, Seed: c.Seed, IgnoreEOS: true, Targets: Targets,
		Clients: c.Clients.Clients, RetryAfterMax: c.Clients.RetryAfterMax,
	})
	if err != nil {
		return res, fmt.Errorf("%s: %w", c, err)
	}
	lv := rep.Levels[0]
	res.measure(lv)
	if fe != nil {
		samples := smp.finish()
		res.gateway(lv, c, samples)
		most := 0
		for _, s := range samples {
			most = max(most, s.limit)
		}
		res.Problems = append(res.Problems, fe.check(most)...)
		if len(res.Problems) > 0 { // what the gateway saw, to explain them
			for _, l := range fe.log.lines() {
				res.Problems = append(res.Problems, "the gateway logged: "+l)
			}
		}
	}
	res.Wall = time.Since(started).Round(time.Millisecond).String()
	return res, nil
}
