package sim

import (
	"flag"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

var (
	explore  = flag.Bool("explore", false, "print exploratory tables")
	exM      = flag.Int("M", 0, "")
	exBase   = flag.Duration("base", 0, "")
	exSeq    = flag.Duration("seq", 0, "")
	exPre    = flag.Duration("pre", 0, "")
	exCaps   = flag.String("caps", "1,8,32", "")
	exReqMul = flag.Int("mul", 10, "")
)

func TestExplore(t *testing.T) {
	if !*explore {
		t.Skip("-explore not set")
	}
	p := GB10BF16
	if *exM > 0 {
		p.MaxBatchedTokens = *exM
	}
	if *exBase > 0 {
		p.StepBase = *exBase
	}
	if *exSeq > 0 {
		p.StepPerSeq = *exSeq
	}
	if *exPre > 0 {
		p.StepPerPrefillToken = *exPre
	}
	var caps []int
	fmt.Sscan(*exCaps, &caps)
	for _, n := range []int{1, 8, 32} {
		synctest.Test(t, func(t *testing.T) {
			s := runLoad(t, Config{Profile: p, TimeScale: 1}, load{users: n, requests: max(100, *exReqMul*n), work: Table1Workload})
			fmt.Printf("M=%d cap %2d: %6.1f tok/s ttft p50 %8s p99 %8s tpot p50 %7s (%d ok %d failed, %v)\n", p.MaxBatchedTokens, n, s.tokPerSec, ms(s.ttftP50), ms(s.ttftP99), ms(s.tpotP50), s.completed, s.failed, s.duration.Round(time.Second))
		})
	}
}
