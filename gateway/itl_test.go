package gateway

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// itlOpts are kneecap_itl_seconds's options (metrics.go).
func itlOpts() prometheus.HistogramOpts {
	return histogram("kneecap_itl_seconds", "Gaps between successive output chunks, pooled over requests.",
		prometheus.ExponentialBucketsRange(0.001, 5, 20))
}

// gather returns what a registry of c exposes of its one histogram, the
// created timestamp left out (each histogram takes its own clock's).
func gather(t *testing.T, c prometheus.Collector) *dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || len(mfs[0].Metric) != 1 {
		t.Fatalf("gathered %v, want one histogram", mfs)
	}
	m := mfs[0].Metric[0]
	m.Histogram.CreatedTimestamp = nil
	return m
}

// TestITLHistogramAsPrometheus: the ITL histogram, fed in batches, exposes
// exactly what prometheus's histogram of the same options exposes fed one
// value at a time (classic buckets, count, sum, native buckets), also
// past the bound on native buckets, where both make them wider.
func TestITLHistogramAsPrometheus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		v     func(r *rand.Rand) float64
		wider bool // past the bound on native buckets
	}{
		{"paced", 20000, func(r *rand.Rand) float64 { return 0.02 * math.Exp(0.3*r.NormFloat64()) }, false},
		{"together and apart", 20000, func(r *rand.Rand) float64 {
			if r.IntN(3) == 0 {
				return float64(r.IntN(2000)) * 1e-9 // events read together, and zero gaps
			}
			return 0.005 * math.Exp(r.NormFloat64())
		}, false},
		{"beyond the bucket bound", 50000, func(r *rand.Rand) float64 { return math.Pow(10, -9+14*r.Float64()) }, true},
		{"far apart", 5000, func(r *rand.Rand) float64 { // keys further apart than the slice of counts spans
			if r.IntN(10) == 0 {
				return math.Pow(10, -300+600*r.Float64())
			}
			return 0.02 * math.Exp(0.3*r.NormFloat64())
		}, true},
		{"bounds", 2000, func(r *rand.Rand) float64 {
			b := prometheus.ExponentialBucketsRange(0.001, 5, 20)
			return [...]float64{b[r.IntN(len(b))], math.Ldexp(nativeBounds[3][r.IntN(8)], r.IntN(20)-10), -0.5, 0}[r.IntN(4)]
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.n)))
			want := prometheus.NewHistogram(itlOpts())
			got, err := newITLHistogram(itlOpts())
			if err != nil {
				t.Fatal(err)
			}
			vs := make([]float64, tc.n)
			for i := range vs {
				vs[i] = tc.v(r)
				want.Observe(vs[i])
			}
			for len(vs) > 0 {
				k := min(1+r.IntN(32), len(vs))
				got.add(k, func(i int) float64 { return vs[i] })
				vs = vs[k:]
			}
			w, g := gather(t, want), gather(t, got)
			if !proto.Equal(w, g) {
				t.Errorf("exposition differs:\nprometheus %v\nbatched    %v", w, g)
			}
			if tc.wider && g.Histogram.GetSchema() >= 3 {
				t.Errorf("schema %d: the bound on native buckets was never reached", g.Histogram.GetSchema())
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		got, _ := newITLHistogram(itlOpts())
		if w, g := gather(t, prometheus.NewHistogram(itlOpts())), gather(t, got); !proto.Equal(w, g) {
			t.Errorf("exposition differs:\nprometheus %v\nbatched    %v", w, g)
		}
	})
}

// TestITLHistogramResets: past the bound on native buckets, the histogram
// resets once the minimum reset duration has passed since its start (then
// keeping the value that overflowed), or when that time comes, as
// prometheus's does.
func TestITLHistogramResets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	h, err := newITLHistogram(itlOpts())
	if err != nil {
		t.Fatal(err)
	}
	h.now = func() time.Time { return now }
	h.resetLocked(now)
	wide := func(n int) {
		h.add(n, func(i int) float64 { return math.Ldexp(1, i-n/2) })
	}
	wide(200) // 200 buckets apart: over the bound within the first hour
	if s := h.schema; s >= 3 || h.resetAt != t0.Add(time.Hour) {
		t.Fatalf("schema %d, reset due at %v: want wider buckets and a reset at %v", s, h.resetAt, t0.Add(time.Hour))
	}
	now = t0.Add(time.Hour + time.Second)
	if m := gather(t, h); m.Histogram.GetSampleCount() != 0 || m.Histogram.GetSchema() != 3 {
		t.Fatalf("after the reset's time: count %d, schema %d; want an empty histogram at schema 3", m.Histogram.GetSampleCount(), m.Histogram.GetSchema())
	}
	now = now.Add(2 * time.Hour)
	wide(200) // over the bound again, an hour and more after that reset: reset at once, keeping the last value
	if m := gather(t, h); m.Histogram.GetSampleCount() >= 200 || h.lastReset != now {
		t.Fatalf("count %d, last reset %v: want a reset at %v", m.Histogram.GetSampleCount(), h.lastReset, now)
	}
}
