package bench

import (
	"math"
	"slices"
	"time"
)

// Summary is a level's (or a time slice's) numbers, with vLLM's definitions.
type Summary struct {
	Level    float64       // concurrency or rate
	Duration time.Duration // the window the rates are over

	Completed int // completed requests (good or not)
	Good      int // completed requests that met every target
	Rejected  int // HTTP 429
	Failed    int // errors of any other kind
	// GaveUp counts the refused or failed attempts that their clients did
	// not retry: requests that failed in their application (see Clients).
	GaveUp     int
	Unfinished int // cut off by the end of the level; not in any rate

	InputTokens  int
	OutputTokens int

	RequestThroughput float64 // completed / s
	Goodput           float64 // good / s
	OutputThroughput  float64 // output tokens / s
	TotalThroughput   float64 // (input + output) tokens / s
	// Attainment is good / (completed + rejected + failed): the share of the
	// requests that ended in the window that were good.
	Attainment float64

	TTFT, TPOT, ITL, E2E Stats
}

// Stats are a latency distribution's summary. Percentiles interpolate
// linearly between order statistics, as numpy's (and so vLLM's) do.
type Stats struct {
	N                             int
	Mean, Std, P50, P90, P99, Max time.Duration
}

// Slice returns the records that ended (completed, rejected or failed) at or
// after from and before to: a time slice, for judging parts of a run apart.
func Slice(recs []Record, from, to time.Time) []Record {
	var out []Record
	for _, r := range recs {
		if r.Outcome != Unfinished && !r.End.Before(from) && r.End.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// summarize is the level's Summary: its measured records and those cut off.
func (lv *Level) summarize() Summary {
	var recs []Record
	for _, r := range lv.Records {
		if r.Measured || r.Outcome == Unfinished {
			recs = append(recs, r)
		}
	}
	return Summarize(recs, lv.WindowEnd.Sub(lv.WindowStart), lv.Value)
}

// Summarize computes the numbers of recs over a window of the given length;
// records with Outcome Unfinished are only counted as such.
func Summarize(recs []Record, window time.Duration, level float64) Summary {
	s := Summary{Level: level, Duration: window}
	var ttft, tpot, itl, e2e []time.Duration
	for i := range recs {
		r := &recs[i]
		if r.GaveUp {
			s.GaveUp++
		}
		switch r.Outcome {
		case Unfinished:
			s.Unfinished++
			continue
		case Rejected:
			s.Rejected++
			continue
		case Failed:
			s.Failed++
			continue
		}
		s.Completed++
		if r.Good {
			s.Good++
		}
		s.InputTokens += r.PromptTokens
		s.OutputTokens += r.OutputTokens
		if !r.First.IsZero() {
			ttft = append(ttft, r.TTFT)
			e2e = append(e2e, r.E2E)
		} else if r.NoStream {
			e2e = append(e2e, r.E2E)
		}
		if r.HasTPOT() {
			tpot = append(tpot, r.TPOT)
		}
		itl = append(itl, r.ITL...)
	}
	if sec := window.Seconds(); sec > 0 {
		s.RequestThroughput = float64(s.Completed) / sec
		s.Goodput = float64(s.Good) / sec
		s.OutputThroughput = float64(s.OutputTokens) / sec
		s.TotalThroughput = float64(s.InputTokens+s.OutputTokens) / sec
	}
	if n := s.Completed + s.Rejected + s.Failed; n > 0 {
		s.Attainment = float64(s.Good) / float64(n)
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = stats(ttft), stats(tpot), stats(itl), stats(e2e)
	return s
}

func stats(d []time.Duration) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	slices.Sort(d)
	var sum float64
	for _, v := range d {
		sum += float64(v)
	}
	mean := sum / float64(len(d))
	var sq float64
	for _, v := range d {
		sq += (float64(v) - mean) * (float64(v) - mean)
	}
	return Stats{
		N: len(d), Mean: time.Duration(mean), Std: time.Duration(math.Sqrt(sq / float64(len(d)))),
		P50: Percentile(d, 50), P90: Percentile(d, 90), P99: Percentile(d, 99), Max: d[len(d)-1],
	}
}

// Percentile returns the p-th percentile (0-100) of sorted, interpolating
// linearly between the closest ranks (numpy's default).
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	pos := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := pos - float64(lo)
	return sorted[lo] + time.Duration(frac*float64(sorted[lo+1]-sorted[lo]))
}

// Knee names two levels: Best, the one with the highest goodput, and
// LastMet, the highest level whose attainment reached MinAttainment. Each is
// an index into Report.Levels, or -1 when there is none.
type Knee struct {
	Best, LastMet int
}

// Knee finds the knee of the report's levels.
func (rep *Report) Knee() Knee {
	k := Knee{Best: -1, LastMet: -1}
	for i, lv := range rep.Levels {
		s := lv.Summary
		if s.Good > 0 && (k.Best < 0 || s.Goodput > rep.Levels[k.Best].Summary.Goodput) {
			k.Best = i
		}
		if s.Completed > 0 && s.Attainment >= rep.MinAttainment &&
			(k.LastMet < 0 || lv.Value > rep.Levels[k.LastMet].Value) {
			k.LastMet = i
		}
	}
	return k
}

// Scaled returns the report as it reads in a clock f times slower: every
// duration in the targets and summaries is multiplied by f and every rate
// divided by f. It is for a simulated engine run with --time-scale f, whose
// numbers then read in the engine's own time. Records are left as measured.
func (rep Report) Scaled(f float64) Report {
	if f == 1 || f <= 0 {
		return rep
	}
	d := func(v time.Duration) time.Duration { return time.Duration(float64(v) * f) }
	st := func(s Stats) Stats {
		return Stats{N: s.N, Mean: d(s.Mean), Std: d(s.Std), P50: d(s.P50), P90: d(s.P90), P99: d(s.P99), Max: d(s.Max)}
	}
	rep.Targets = Targets{TTFT: d(rep.Targets.TTFT), TPOT: d(rep.Targets.TPOT), E2E: d(rep.Targets.E2E)}
	levels := make([]Level, len(rep.Levels))
	for i, lv := range rep.Levels {
		s := &lv.Summary
		s.Duration = d(s.Duration)
		s.RequestThroughput /= f
		s.Goodput /= f
		s.OutputThroughput /= f
		s.TotalThroughput /= f
		s.TTFT, s.TPOT, s.ITL, s.E2E = st(s.TTFT), st(s.TPOT), st(s.ITL), st(s.E2E)
		if rep.Mode == Open {
			lv.Value /= f
		}
		levels[i] = lv
	}
	rep.Levels = levels
	return rep
}
