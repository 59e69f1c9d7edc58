package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotFormat returns "png" or "svg" from a file name's extension.
func PlotFormat(name string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".png", ".svg":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("plot %q: want a .png or .svg file", name)
	}
}

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
)

// WritePlot draws the report in format "png" or "svg": throughput and
// goodput against the level on the top panel, TTFT and TPOT percentiles
// (log scale) with the targets drawn as flat lines on the bottom one.
func (rep *Report) WritePlot(w io.Writer, format string) error {
	return writePlots(w, format, nil, []Report{*rep})
}

// WriteComparisonPlot draws several reports of the same levels on the same
// two panels, one colour per report: goodput (solid) and throughput
// (dotted); TTFT p50 (solid), TTFT p99 (dotted) and TPOT p50 (dashed).
func WriteComparisonPlot(w io.Writer, format string, names []string, reps []Report) error {
	return writePlots(w, format, names, reps)
}

func writePlots(w io.Writer, format string, names []string, reps []Report) error {
	top, bottom, err := plots(names, reps)
	if err != nil {
		return err
	}
	width, height := 8*vg.Inch, 8*vg.Inch
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	case "svg":
		c = vgsvg.New(width, height)
	default:
		return fmt.Errorf("plot format %q: want png or svg", format)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	_, err = c.WriteTo(w)
	return err
}

// line is one series to draw.
type line struct {
	p    *plot.Plot
	name string
	c    color.Color
	dash []vg.Length
	y    func(Summary) float64
}

var (
	dashed = []vg.Length{vg.Points(4), vg.Points(2)}
	dotted = []vg.Length{vg.Points(1), vg.Points(2)}
)

func plots(names []string, reps []Report) (top, bottom *plot.Plot, err error) {
	if len(reps) == 0 || len(reps[0].Levels) == 0 {
		return nil, nil, fmt.Errorf("plot: no levels")
	}
	rep := &reps[0]
	xname := "concurrency (users)"
	if rep.Mode == Open {
		xname = "arrival rate (req/s)"
	}
	logX := rep.levelsSpan() >= 8
	top, bottom = plot.New(), plot.New()
	top.Title.Text = "Throughput and goodput (" + rep.Targets.String() + ")"
	top.Y.Label.Text = "requests / s"
	bottom.Title.Text = "Latency percentiles (ms); targets dashed grey"
	bottom.Y.Label.Text = "ms (log)"
	bottom.Y.Scale = plot.LogScale{}
	bottom.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Label.Text = xname
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		var ticks []plot.Tick
		for _, lv := range rep.Levels {
			ticks = append(ticks, plot.Tick{Value: lv.Value, Label: strconv.FormatFloat(lv.Value, 'g', -1, 64)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		if logX {
			p.X.Scale = plot.LogScale{}
		}
	}
	top.Y.Min = 0
	ms := func(d time.Duration) float64 { return msf(d) }
	var lines []line
	if len(reps) == 1 {
		lines = []line{
			{top, "throughput (req/s)", blue, nil, func(s Summary) float64 { return s.RequestThroughput }},
			{top, "goodput (req/s)", green, nil, func(s Summary) float64 { return s.Goodput }},
			{bottom, "TTFT p50", orange, nil, func(s Summary) float64 { return ms(s.TTFT.P50) }},
			{bottom, "TTFT p99", red, nil, func(s Summary) float64 { return ms(s.TTFT.P99) }},
			{bottom, "TPOT p50", blue, dashed, func(s Summary) float64 { return ms(s.TPOT.P50) }},
			{bottom, "TPOT p90", green, dashed, func(s Summary) float64 { return ms(s.TPOT.P90) }},
			{bottom, "TPOT p99", red, dashed, func(s Summary) float64 { return ms(s.TPOT.P99) }},
		}
		if err := addLines(rep, lines, bottom); err != nil {
			return nil, nil, err
		}
	} else {
		palette := []color.Color{red, green, blue, orange}
		for i := range reps {
			c := palette[i%len(palette)]
			n := names[i]
			lines = []line{
				{top, n + " goodput", c, nil, func(s Summary) float64 { return s.Goodput }},
				{top, n + " throughput", c, dotted, func(s Summary) float64 { return s.RequestThroughput }},
				{bottom, n + " TTFT p50", c, nil, func(s Summary) float64 { return ms(s.TTFT.P50) }},
				{bottom, n + " TTFT p99", c, dotted, func(s Summary) float64 { return ms(s.TTFT.P99) }},
				{bottom, n + " TPOT p50", c, dashed, func(s Summary) float64 { return ms(s.TPOT.P50) }},
			}
			if err := addLines(&reps[i], lines, bottom); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"TTFT target", rep.Targets.TTFT}, {"TPOT target", rep.Targets.TPOT}} {
		if t.d <= 0 {
			continue
		}
		v := msf(t.d)
		l := plotter.NewFunction(func(float64) float64 { return v })
		l.Color, l.Dashes, l.Width = grey, []vg.Length{vg.Points(6), vg.Points(3)}, vg.Points(1.5)
		bottom.Add(l)
		bottom.Legend.Add(t.name+" "+t.d.String(), l)
		// Keep the target inside the y range even when every sample is below it.
		bottom.Y.Max = math.Max(bottom.Y.Max, v*1.2)
		bottom.Y.Min = math.Min(bottom.Y.Min, v/1.2)
	}
	if math.IsInf(bottom.Y.Min, 0) || bottom.Y.Min <= 0 || bottom.Y.Max <= bottom.Y.Min {
		bottom.Y.Min, bottom.Y.Max = 1, 1000 // nothing measured: an empty, valid log axis
	}
	// Headroom above the data for the legends in the top-left corners.
	top.Y.Max *= 1.4
	bottom.Y.Max *= 6
	if k := rep.Knee(); k.Best >= 0 && len(reps) == 1 {
		top.Title.Text += fmt.Sprintf(" - best goodput at %s", level(rep.Mode, rep.Levels[k.Best].Value))
	}
	return top, bottom, nil
}

// addLines draws each series of rep; on the log-scale panel, levels with no
// sample are left out.
func addLines(rep *Report, lines []line, logPanel *plot.Plot) error {
	for _, s := range lines {
		var xy plotter.XYs
		for _, lv := range rep.Levels {
			v := s.y(lv.Summary)
			if s.p == logPanel && v <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: lv.Value, Y: v})
		}
		if len(xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = s.c, s.c
		l.Width = vg.Points(1.5)
		l.Dashes = s.dash
		s.p.Add(l, pts)
		s.p.Legend.Add(s.name, l, pts)
	}
	return nil
}

// levelsSpan is the ratio of the highest level to the lowest.
func (rep *Report) levelsSpan() float64 {
	lo, hi := math.Inf(1), 0.0
	for _, lv := range rep.Levels {
		lo, hi = math.Min(lo, lv.Value), math.Max(hi, lv.Value)
	}
	return hi / lo
}
