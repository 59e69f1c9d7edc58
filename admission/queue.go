package admission

import (
	"container/list"
	"slices"
	"time"
)

// ClassConfig is one priority class of the limiter's queue. The order of
// Config.Classes is the order of priority: the first class is served
// first at every slot grant.
type ClassConfig struct {
	// Name labels the class in ClassStats (metrics, /status).
	Name string
	// QueueShare is the share of Config.MaxQueue the class's waiters may
	// take, in (0, 1]; 0 means 1 (the whole queue).
	QueueShare float64
}

// Fairness sets how the slots of one class are shared among tenants:
// by the Virtual Token Counter of Sheng et al. (OSDI 2024). Each tenant's
// counter grows by the tokens it is served (PromptWeight x prompt +
// OutputWeight x output) divided by its weight; a slot goes to the waiting
// tenant with the smallest counter, and a tenant that starts waiting is
// lifted to the smallest counter of those already waiting, so that idle
// time is no credit. The zero value weighs every token 1 and every
// tenant 1, and tracks DefaultMaxTenants tenants.
type Fairness struct {
	// PromptWeight and OutputWeight price a served token; both 0 mean 1
	// each.
	PromptWeight, OutputWeight float64
	// Weight returns a tenant's weight (> 0; a tenant of weight 2 is
	// served twice the tokens of one of weight 1 while both wait). nil,
	// or an answer <= 0, means 1.
	Weight func(tenant string) float64
	// MaxTenants bounds the tenants whose counters are kept; the least
	// recently seen idle one is forgotten first. 0 means DefaultMaxTenants.
	MaxTenants int
}

// DefaultMaxTenants is the number of tenants tracked when
// Fairness.MaxTenants is 0.
const DefaultMaxTenants = 4096

// flowKey names one tenant's flow in one class.
type flowKey struct {
	class  int
	tenant string
}

// flow is one tenant's requests in one class: its waiters (FIFO) and its
// virtual token counter. Guarded by the limiter's lock.
type flow struct {
	key     flowKey
	waiters list.List // of *waiter, front = oldest
	vtc     float64   // weighted tokens served / weight
	weight  float64
	cost    float64 // mean cost of a request (weighted tokens); 0 until one was served
	served  float64 // weighted tokens served in all
	granted int64   // slots granted in all
	running int
	peak    int           // the most running since the last shortTenant
	away    time.Time     // when the last of its refused requests is due back, at the latest
	lru     *list.Element // in fairQueue.lru
}

// fairQueue is the limiter's queue: per class (in priority order), per
// tenant flows of FIFO waiters. Guarded by the limiter's lock.
type fairQueue struct {
	classes  []classQueue
	flows    map[flowKey]*flow
	lru      list.List // of *flow, front = most recently used
	n        int       // waiters in all
	tokens   int       // their prompt tokens (estimated)
	maxQueue int
	fair     Fairness
}

type classQueue struct {
	cfg   ClassConfig
	bound int // waiters this class may have
	n     int // waiters now
	// idleAway is when the last refused request of a tenant that had
	// nothing running or waiting is due back, at the latest.
	idleAway time.Time
	// returns counts the waiters that were refused before (come back).
	returns int
	active  []*flow // flows with waiters
	// busy holds the flows with requests running or waiting: at most the
	// cap plus the queue, however many tenants are known.
	busy map[*flow]struct{}
	// counted refusals and grants, for ClassStats
	granted, shed int64
	// since is the class's last grant, or when it began to wait if that
	// is later (see policy.starved).
	since time.Time
}

func newFairQueue(classes []ClassConfig, maxQueue int, f Fairness) *fairQueue {
	if len(classes) == 0 {
		classes = []ClassConfig{{Name: "default"}}
	}
	if f.PromptWeight == 0 && f.OutputWeight == 0 {
		f.PromptWeight, f.OutputWeight = 1, 1
	}
	if f.MaxTenants <= 0 {
		f.MaxTenants = DefaultMaxTenants
	}
	q := &fairQueue{flows: map[flowKey]*flow{}, maxQueue: maxQueue, fair: f}
	for _, c := range classes {
		share := c.QueueShare
		if share <= 0 || share > 1 {
			share = 1
		}
		q.classes = append(q.classes, classQueue{cfg: c, bound: max(int(share*float64(maxQueue)+0.5), min(maxQueue, 1)), busy: map[*flow]struct{}{}})
	}
	q.lru.Init()
	return q
}

// classOf clamps a request's class to a valid one: out of range is the
// lowest priority, never the highest.
func (q *fairQueue) classOf(c int) int {
	if c < 0 || c >= len(q.classes) {
		return len(q.classes) - 1
	}
	return c
}

// flowFor returns the flow of (class, tenant), creating it and forgetting
// the least recently used idle flow when there are too many.
func (q *fairQueue) flowFor(class int, tenant string) *flow {
	k := flowKey{q.classOf(class), tenant}
	if f := q.flows[k]; f != nil {
		q.lru.MoveToFront(f.lru)
		return f
	}
	for e := q.lru.Back(); e != nil && len(q.flows) >= q.fair.MaxTenants; {
		prev := e.Prev()
		if f := e.Value.(*flow); f.running == 0 && f.waiters.Len() == 0 {
			q.lru.Remove(e)
			delete(q.flows, f.key)
		}
		e = prev
	}
	w := 1.0
	if q.fair.Weight != nil {
		if v := q.fair.Weight(tenant); v > 0 {
			w = v
		}
	}
	f := &flow{key: k, weight: w}
	f.waiters.Init()
	f.lru = q.lru.PushFront(f)
	q.flows[k] = f
	return f
}

// waitingAtOrAbove counts the waiters of class c and the classes above it:
// a request of class c may skip the queue only when it is 0 (a lower
// class may wait on slots held back for higher ones, see policy.reserve).
func (q *fairQueue) waitingAtOrAbove(c int) int {
	n := 0
	for i := 0; i <= q.classOf(c); i++ {
		n += q.classes[i].n
	}
	return n
}

// returnsAtOrAbove counts the waiters come back after a refusal of class
// c and the classes above it.
func (q *fairQueue) returnsAtOrAbove(c int) int {
	n := 0
	for i := 0; i <= q.classOf(c); i++ {
		n += q.classes[i].returns
	}
	return n
}

// first reports whether a new request of flow f would be the next
// granted: no class above f's has waiters, f has none, and f, at the
// counter it would have once waiting (see push), is served before every
// waiting flow of its class.
func (q *fairQueue) first(f *flow) bool {
	if f.waiters.Len() > 0 || q.waitingAtOrAbove(f.key.class) > q.classes[f.key.class].n {
		return false
	}
	cq := &q.classes[f.key.class]
	v := q.lifted(f)
	for _, a := range cq.active {
		if !before(f, v, a, a.vtc) {
			return false
		}
	}
	return true
}

// lifted is the counter flow f would have once waiting (see push).
func (q *fairQueue) lifted(f *flow) float64 {
	cq := &q.classes[f.key.class]
	v := f.vtc
	if f.waiters.Len() == 0 && len(cq.active) > 0 {
		low := cq.active[0].vtc
		for _, a := range cq.active[1:] {
			low = min(low, a.vtc)
		}
		v = max(v, low)
	}
	return v
}

// full reports whether a request of class c finds no room: the whole
// queue or its class's share is taken.
func (q *fairQueue) full(c int) bool {
	return q.n >= q.maxQueue || q.classes[c].n >= q.classes[c].bound
}

// push queues w on its flow; a flow that starts waiting is lifted to the
// smallest counter of its class's waiting flows (idle time is no credit).
func (q *fairQueue) push(w *waiter) {
	f := w.flow
	cq := &q.classes[f.key.class]
	if f.waiters.Len() == 0 {
		if len(cq.active) > 0 {
			low := cq.active[0].vtc
			for _, a := range cq.active[1:] {
				low = min(low, a.vtc)
			}
			f.vtc = max(f.vtc, low)
		}
		cq.active = append(cq.active, f)
	}
	w.elem = f.waiters.PushBack(w)
	if w.cand.back > 0 {
		// A request come back goes before those that come for the first
		// time, in the order they were first refused: it waited outside,
		// told to come back for this slot, and its client may not retry
		// many times more.
		e := f.waiters.Front()
		for e != w.elem && e.Value.(*waiter).cand.back > 0 && !w.cand.since.Before(e.Value.(*waiter).cand.since) {
			e = e.Next()
		}
		if e != w.elem {
			f.waiters.MoveBefore(w.elem, e)
		}
		cq.returns++
	}
	if cq.n == 0 && w.enqueued.After(cq.since) {
		cq.since = w.enqueued
	}
	cq.n++
	q.n++
	q.tokens += w.cand.prompt
	cq.track(f)
}

// remove takes w out of the queue.
func (q *fairQueue) remove(w *waiter) {
	f := w.flow
	cq := &q.classes[f.key.class]
	f.waiters.Remove(w.elem)
	if w.cand.back > 0 {
		cq.returns--
	}
	cq.n--
	q.n--
	q.tokens -= w.cand.prompt
	if f.waiters.Len() == 0 {
		if i := slices.Index(cq.active, f); i >= 0 {
			cq.active = slices.Delete(cq.active, i, i+1)
		}
	}
	cq.track(f)
}

// track keeps f in the class's busy set while it has requests running or
// waiting.
func (cq *classQueue) track(f *flow) {
	if f.running > 0 || f.waiters.Len() > 0 {
		cq.busy[f] = struct{}{}
	} else {
		delete(cq.busy, f)
	}
}

// next returns the waiter the next slot goes to: the highest class with
// waiters, its flow with the smallest counter (ties: the flow with fewer
// requests running, then the oldest head; a flow that just started
// waiting was lifted to the smallest counter and so goes first unless it
// runs more), the flow's oldest waiter. nil when nobody waits.
func (q *fairQueue) next() *waiter {
	for i := range q.classes {
		if w := q.classes[i].next(); w != nil {
			return w
		}
	}
	return nil
}

func (cq *classQueue) next() *waiter {
	var best *flow
	for _, f := range cq.active {
		if best == nil || before(f, f.vtc, best, best.vtc) {
			best = f
		}
	}
	if best == nil {
		return nil
	}
	return best.waiters.Front().Value.(*waiter)
}

// before reports whether flow a, at counter va, is served before flow b
// at counter vb (see next). A flow without waiters counts as one that
// would arrive now.
func before(a *flow, va float64, b *flow, vb float64) bool {
	if va != vb {
		return va < vb
	}
	if a.running != b.running {
		return a.running < b.running
	}
	return head(a).Before(head(b))
}

func head(f *flow) time.Time {
	if f.waiters.Len() == 0 {
		return time.Now()
	}
	return f.waiters.Front().Value.(*waiter).enqueued
}

// charge counts a grant to w's flow: the flow's mean request cost (its
// tokens are not known yet), corrected at release by what was served.
func (q *fairQueue) charge(f *flow) float64 {
	est := f.cost
	if est == 0 {
		est = 1
	}
	f.vtc += est / f.weight
	f.running++
	f.peak = max(f.peak, f.running)
	f.granted++
	cq := &q.classes[f.key.class]
	cq.granted++
	cq.track(f)
	return est
}

// settle replaces a grant's charge by the tokens served.
func (q *fairQueue) settle(f *flow, charged float64, prompt, output int) {
	f.running--
	q.classes[f.key.class].track(f)
	if prompt <= 0 && output <= 0 {
		return // nothing known (refused upstream, cancelled): the estimate stands
	}
	cost := q.fair.PromptWeight*float64(max(prompt, 0)) + q.fair.OutputWeight*float64(max(output, 0))
	f.vtc += (cost - charged) / f.weight
	f.served += cost
	if f.cost == 0 {
		f.cost = cost
	} else {
		f.cost += (cost - f.cost) / 8
	}
}

// room reports whether a request of flow f may queue, and the waiter it
// displaces (nil when there is room without). A full queue yields first
// the newest waiter of the lowest class below f's that has any (taken
// from its longest flow; not when f's own class is at its share, which
// only a waiter of its class can free); else, within f's class, the
// newest waiter of the longest flow when that flow has at least two more
// waiters than f (a tenant over its share of the queue yields to one
// under it).
func (q *fairQueue) room(f *flow) (victim *waiter, ok bool) {
	c := f.key.class
	if !q.full(c) {
		return nil, true
	}
	if q.classes[c].n < q.classes[c].bound {
		for lo := len(q.classes) - 1; lo > c; lo-- {
			if w := q.classes[lo].newestOfLongest(); w != nil {
				return w, true
			}
		}
	}
	if w := q.classes[c].newestOfLongest(); w != nil && w.flow.waiters.Len() >= f.waiters.Len()+2 {
		return w, true
	}
	return nil, false
}

func (cq *classQueue) newestOfLongest() *waiter {
	var long *flow
	for _, f := range cq.active {
		if long == nil || f.waiters.Len() > long.waiters.Len() || (f.waiters.Len() == long.waiters.Len() && f.vtc > long.vtc) {
			long = f
		}
	}
	if long == nil {
		return nil
	}
	return long.waiters.Back().Value.(*waiter)
}

// position estimates the 1-based place a new request of flow f would take
// in the order of grants: every waiter of a higher class; in its own
// class, the flows served before f's next turn (at the counter it would
// have once waiting, see push), then one grant per waiting flow for each
// of f's waiters ahead of it (fair shares take turns); at most the
// class's waiters plus one.
func (q *fairQueue) position(f *flow) int {
	p := 0
	for c := 0; c < f.key.class; c++ {
		p += q.classes[c].n
	}
	cq := &q.classes[f.key.class]
	v := q.lifted(f)
	ahead, turns := 0, len(cq.active)
	for _, a := range cq.active {
		if a != f && before(a, a.vtc, f, v) {
			ahead++
		}
	}
	if f.waiters.Len() == 0 {
		turns++
	}
	return p + min(cq.n+1, 1+ahead+f.waiters.Len()*turns)
}

// positionOf estimates the 1-based place of a queued waiter in the order
// of grants: the waiters of higher classes, its place in its flow, and as
// many of each other waiting flow of its class (fair shares take turns).
// With one class and one tenant it is the waiter's place in the FIFO.
func (q *fairQueue) positionOf(w *waiter) int {
	f := w.flow
	p := 0
	for c := 0; c < f.key.class; c++ {
		p += q.classes[c].n
	}
	idx := 1
	for e := f.waiters.Front(); e != nil && e != w.elem; e = e.Next() {
		idx++
	}
	for _, a := range q.classes[f.key.class].active {
		if a != f {
			p += min(a.waiters.Len(), idx)
		}
	}
	return p + idx
}

// behind returns up to n waiters other than w: classes in priority order,
// within a class its flows in the order next would take them, each flow's
// waiters in order.
func (q *fairQueue) behind(w *waiter, n int) []*waiter {
	var out []*waiter
	for i := range q.classes {
		flows := slices.Clone(q.classes[i].active)
		slices.SortStableFunc(flows, func(a, b *flow) int {
			switch {
			case before(a, a.vtc, b, b.vtc):
				return -1
			case before(b, b.vtc, a, a.vtc):
				return 1
			}
			return 0
		})
		for _, f := range flows {
			for e := f.waiters.Front(); e != nil; e = e.Next() {
				if x := e.Value.(*waiter); x != w {
					if out = append(out, x); len(out) == n {
						return out
					}
				}
			}
		}
	}
	return out
}
