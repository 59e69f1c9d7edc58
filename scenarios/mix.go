package scenarios

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// Group is one kind of closed-loop user of a Mix: how many, what each
// request carries, and the label its results are counted under.
type Group struct {
	// Label names the group in RunResult.Classes (the bench's
	// Request.Class).
	Label string
	Users int
	// Header is sent with every request of the group (a class, a tenant).
	Header http.Header
}

// Mix is a scenario of issue 16: several groups of users on one engine,
// run three ways, each with the adaptive controller: "classes" (the
// gateway with Env: priority classes or tenants), "alone" (the same
// gateway with only the Alone groups) and "fifo" (today's gateway, one
// FIFO queue, every group).
type Mix struct {
	ID       int
	Name     string
	Profile  sim.Profile
	Workload sim.Workload
	Groups   []Group
	Env      []string
	Alone    []string // labels of the groups of the "alone" run
}

// MixVariants are the runs of every Mix.
var MixVariants = []string{"classes", "alone", "fifo"}

// Mixes returns the scenarios of issue 16.
func Mixes() []Mix {
	w := sim.SecondWorkload
	return []Mix{
		{
			// 16 chat users with the operator's targets (TTFT 1s, TPOT
			// 100ms) and 64 batch users with none, on one engine: batch
			// fills only what chat leaves free, and the cap stays where
			// chat's targets hold.
			ID: 14, Name: "priority-mix", Profile: sim.GB10BF16, Workload: w,
			Groups: []Group{
				{Label: "interactive", Users: 16},
				{Label: "batch", Users: 64, Header: http.Header{"X-Kneecap-Class": {"batch"}}},
			},
			Env:   []string{"KNEECAP_CLASSES=interactive;batch:ttft=0,tpot=0", "KNEECAP_DEFAULT_CLASS=interactive"},
			Alone: []string{"interactive"},
		},
		{
			// One class; tenant A with 48 users, tenant B with 4: B keeps
			// what it gets alone while A takes the rest.
			ID: 15, Name: "tenant-fairness", Profile: sim.GB10FP8, Workload: w, // (see mixRow)
			Groups: []Group{
				{Label: "tenant-a", Users: 48, Header: http.Header{"X-Tenant": {"a"}}},
				{Label: "tenant-b", Users: 4, Header: http.Header{"X-Tenant": {"b"}}},
			},
			Env:   []string{"KNEECAP_TENANT_HEADER=x-tenant"},
			Alone: []string{"tenant-b"},
		},
	}
}

// run returns the Run of one variant.
func (m Mix) run(variant string, t Timing, seed uint64) Run {
	groups := m.Groups
	if variant == "alone" {
		groups = nil
		for _, g := range m.Groups {
			for _, a := range m.Alone {
				if g.Label == a {
					groups = append(groups, g)
				}
			}
		}
	}
	users := 0
	for _, g := range groups {
		users += g.Users
	}
	sc := Scenario{ID: m.ID, Name: m.Name, Profile: m.Profile, Workload: m.Workload, Users: users}
	r := Run{Scenario: sc, Mode: Mode{Kind: "adaptive"}, Timing: t, Seed: seed, Workload: mixWorkload(m.Workload, groups)}
	if variant != "fifo" {
		r.Env = m.Env
	}
	return r
}

// mixWorkload gives closed-loop user u the group its index falls in.
func mixWorkload(w sim.Workload, groups []Group) bench.Workload {
	return bench.WorkloadFunc(func(sl bench.Slot) bench.Request {
		g, u := groups[len(groups)-1], sl.User
		for _, gr := range groups {
			if u < gr.Users {
				g = gr
				break
			}
			u -= gr.Users
		}
		n, out := w.Lengths(sl.Rand)
		return bench.Request{Prompt: bench.Words(sl.Rand, n), MaxTokens: out, Class: g.Label, Header: g.Header.Clone()}
	})
}

// workload is the bench workload of a run: its own, or the scenario's.
func (r Run) workload() bench.Workload {
	if r.Workload != nil {
		return r.Workload
	}
	return r.Scenario.workload(r.Timing)
}

// runMixes runs every variant of the chosen mixes, in parallel subtests,
// each in its own bubble, and keeps their results in s.MixRuns.
func (s *Suite) runMixes(t *testing.T, mixes []Mix) {
	var mu sync.Mutex
	s.MixRuns = map[int]map[string]RunResult{}
	t.Run("mixes", func(t *testing.T) {
		for _, m := range mixes {
			for _, v := range MixVariants {
				run := m.run(v, s.Options.Timing, s.Options.Seed)
				t.Run(fmt.Sprintf("%d-%s/%s", m.ID, m.Name, v), func(t *testing.T) {
					res, ok := s.runOne(t, run)
					if !ok {
						return
					}
					res.Mode = v
					mu.Lock()
					defer mu.Unlock()
					if s.MixRuns[m.ID] == nil {
						s.MixRuns[m.ID] = map[string]RunResult{}
					}
					s.MixRuns[m.ID][v] = res
					if s.Options.Progress != nil {
						s.Options.Progress(run.Scenario, res)
					}
				})
			}
		}
	})
}
