package bench

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ms formats a duration in milliseconds with precision that suits its size.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "-"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func pct(v float64) string { return strconv.FormatFloat(v*100, 'f', 0, 64) + "%" }

func level(m Mode, v float64) string {
	if m == Open {
		return strconv.FormatFloat(v, 'g', -1, 64) + "/s"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// WriteTable writes the per-level table, the definitions line and the knee
// lines.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "conc"
	if rep.Mode == Open {
		head = "rate"
	}
	fmt.Fprintf(tw, "%s\tout tok/s\treq/s\tgoodput\tattain\tTTFT p50\tp90\tp99\tTPOT p50\tp90\tp99\tITL p99\tE2E p50\trejected\terrors\t\n", head)
	for _, lv := range rep.Levels {
		s := lv.Summary
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n",
			level(rep.Mode, lv.Value), num(s.OutputThroughput), num(s.RequestThroughput), num(s.Goodput), pct(s.Attainment),
			ms(s.TTFT.P50), ms(s.TTFT.P90), ms(s.TTFT.P99), ms(s.TPOT.P50), ms(s.TPOT.P90), ms(s.TPOT.P99),
			ms(s.ITL.P99), ms(s.E2E.P50), s.Rejected, s.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "latencies in ms;", rep.Definitions())
	for _, l := range rep.KneeLines() {
		fmt.Fprintln(w, l)
	}
	return nil
}

// Definitions states what the numbers mean, to print with them.
func (rep *Report) Definitions() string {
	due := "sent"
	if rep.Mode == Open {
		due = "due (scheduled arrival)"
	}
	return fmt.Sprintf("definitions (vLLM's): TTFT = %s -> first chunk with output; "+
		"TPOT = (E2E - TTFT)/(output_tokens - 1), tokens from the usage report, 1-token requests have none; "+
		"ITL = gaps between output chunks, pooled; E2E = %s -> last output chunk; "+
		"goodput = completed requests meeting %s per second of the window; attainment = good / ended; "+
		"rejected (429) and errors are never good.", due, due, rep.Targets)
}

// KneeLines names the level with the highest goodput and the highest level
// that still met the targets.
func (rep *Report) KneeLines() []string {
	if rep.Targets.IsZero() {
		return []string{"knee: no goodput targets given (--goodput ttft=1s,tpot=100ms)"}
	}
	k := rep.Knee()
	unit := "concurrency"
	if rep.Mode == Open {
		unit = "rate"
	}
	var out []string
	if k.Best < 0 {
		out = append(out, "knee: no level had a good request")
	} else {
		b := rep.Levels[k.Best]
		out = append(out, fmt.Sprintf("knee: highest goodput %s req/s at %s %s (attainment %s)",
			num(b.Summary.Goodput), unit, level(rep.Mode, b.Value), pct(b.Summary.Attainment)))
	}
	if k.LastMet < 0 {
		out = append(out, fmt.Sprintf("knee: no level met the targets (attainment >= %s)", pct(rep.MinAttainment)))
	} else {
		out = append(out, fmt.Sprintf("knee: highest %s that met the targets (attainment >= %s): %s",
			unit, pct(rep.MinAttainment), level(rep.Mode, rep.Levels[k.LastMet].Value)))
	}
	return out
}

// WriteComparison writes reports of the same levels side by side (goodput,
// TTFT and TPOT, rejected), one column group per name. Attainment is left
// out: behind a gateway every retried rejection counts against it, so it
// reads low exactly where the gateway does its job.
func WriteComparison(w io.Writer, names []string, reps []Report) error {
	if len(reps) == 0 {
		return nil
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "conc\t"
	if reps[0].Mode == Open {
		head = "rate\t"
	}
	for i := range reps {
		if i > 0 {
			head += "|\t"
		}
		head += "goodput\tTTFT p50\tp99\tTPOT p50\tp99\trejected\t"
	}
	fmt.Fprintln(tw, head)
	for li, lv := range reps[0].Levels {
		row := level(reps[0].Mode, lv.Value) + "\t"
		for i, rep := range reps {
			if i > 0 {
				row += "|\t"
			}
			if li >= len(rep.Levels) {
				row += strings.Repeat("\t", 6)
				continue
			}
			s := rep.Levels[li].Summary
			row += fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t", num(s.Goodput),
				ms(s.TTFT.P50), ms(s.TTFT.P99), ms(s.TPOT.P50), ms(s.TPOT.P99), s.Rejected)
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A line of names above the column groups, each starting where its
	// group does: after the level column, and after each "|".
	header, _, _ := strings.Cut(buf.String(), "\n")
	starts := []int{strings.Index(header, "goodput")}
	for i, c := range header {
		if c == '|' {
			starts = append(starts, i+3)
		}
	}
	var line strings.Builder
	for i, n := range names {
		if i < len(starts) {
			for line.Len() < starts[i] {
				line.WriteByte(' ')
			}
		}
		line.WriteString(n + " ")
	}
	fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	_, err := w.Write(buf.Bytes())
	return err
}
