package control

// The plateau. Near the knee goodput is flat over several levels: past
// the level where the engine's throughput stops growing, one more running
// request adds as much time per token as it adds work, until the targets
// start to fail. Every level of that plateau serves the same goodput, and
// the lower ones serve it at less latency: fewer requests share each
// decode step. The plan aims at the plateau's right end (the largest level
// within goodputSlack of the best; see goodputBest). Each decision finds
// the plateau and /status, the metrics and the live page show it, with its
// left edge: the lowest level within leftSlack of the best, where the same
// goodput is served at the least latency.

// plateau is the run of levels around the goodput-best level whose
// goodput is within the noise of the best.
type plateau struct {
	from, to int     // the levels of the plateau (0: none)
	left     int     // the left edge: the lowest level within leftSlack of the best
	best     float64 // the highest goodput among them, req/s
	noise    float64 // the band below best that counts as the same goodput, req/s
}

// leftSlack is how far below the best goodput the left edge may be: less
// than goodputSlack, the gain for which the cap is raised.
const leftSlack = 0.02

// plateauOf finds the plateau among levels lo..hi.
func (c *Controller) plateauOf(classes []class, lo, hi int) plateau {
	lo, hi = max(lo, c.cfg.MinCap), min(hi, c.cfg.MaxCap)
	if hi < lo {
		return plateau{}
	}
	g := make([]float64, hi-lo+1)
	bestN := lo
	for n := lo; n <= hi; n++ {
		g[n-lo] = c.goodput(classes, n)
		if g[n-lo] > g[bestN-lo] {
			bestN = n
		}
	}
	p := plateau{from: bestN, to: bestN, left: bestN, best: g[bestN-lo]}
	if p.best <= 0 || !finite(p.best) {
		return plateau{}
	}
	p.noise = goodputSlack * p.best
	for p.from > lo && g[p.from-1-lo] >= p.best-p.noise {
		p.from--
	}
	for p.to < hi && g[p.to+1-lo] >= p.best-p.noise {
		p.to++
	}
	for p.left > lo && g[p.left-1-lo] >= (1-leftSlack)*p.best {
		p.left--
	}
	return p
}
