package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Bucket is one slice of a level's run: rates in requests a second over
// [Start, Start+Width) since the level started. Offered counts requests
// by when they were due (first attempts only: what the load offered),
// the rest by when they ended. Cap is the gateway's cap at the end of the
// bucket (Config.CapURL), NaN when not known.
type Bucket struct {
	Start, Width time.Duration
	Offered      float64
	Good         float64 // completed and met every target
	Late         float64 // completed and missed one
	Refused      float64 // 429 or 503 from admission
	Failed       float64 // any other error
	Cap          float64
}

// Timeline cuts the level's run into buckets of width (zero: a sixtieth
// of the run, at least a second) from its start to its last request's end.
func (lv *Level) Timeline(width time.Duration) []Bucket {
	var end time.Duration
	for _, r := range lv.Records {
		end = max(end, r.End.Sub(lv.Start), r.Due.Sub(lv.Start))
	}
	if width <= 0 {
		width = max((end / 60).Round(time.Second), time.Second)
	}
	n := int(end/width) + 1
	out := make([]Bucket, n)
	for i := range out {
		out[i] = Bucket{Start: time.Duration(i) * width, Width: width, Cap: math.NaN()}
	}
	per := 1 / width.Seconds()
	at := func(t time.Time) *Bucket {
		i := int(t.Sub(lv.Start) / width)
		return &out[min(max(i, 0), n-1)]
	}
	for _, r := range lv.Records {
		if r.Attempt == 0 {
			at(r.Due).Offered += per
		}
		b := at(r.End)
		switch {
		case r.Outcome == Completed && r.Good:
			b.Good += per
		case r.Outcome == Completed:
			b.Late += per
		case r.Outcome == Rejected:
			b.Refused += per
		case r.Outcome == Failed:
			b.Failed += per
		}
	}
	for _, c := range lv.Caps {
		at(c.At).Cap = float64(c.Cap)
	}
	return out
}

// ScaleTimeline returns the buckets of a run whose server ran f times
// faster than the time it models (see Report.Scaled): times multiplied by
// f, rates divided by it.
func ScaleTimeline(bs []Bucket, f float64) []Bucket {
	if f == 1 || f <= 0 {
		return bs
	}
	out := make([]Bucket, len(bs))
	for i, b := range bs {
		b.Start, b.Width = time.Duration(float64(b.Start)*f), time.Duration(float64(b.Width)*f)
		b.Offered, b.Good, b.Late, b.Refused, b.Failed = b.Offered/f, b.Good/f, b.Late/f, b.Refused/f, b.Failed/f
		out[i] = b
	}
	return out
}

// WriteTimeline writes buckets as a table.
func WriteTimeline(w io.Writer, bs []Bucket) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "t (s)\toffered/s\tgood/s\tlate/s\trefused/s\tfailed/s\tcap\t\n")
	for _, b := range bs {
		c := "-"
		if !math.IsNaN(b.Cap) {
			c = fmt.Sprint(b.Cap)
		}
		fmt.Fprintf(tw, "%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", b.Start.Seconds(), b.Offered, b.Good, b.Late, b.Refused, b.Failed, c)
	}
	return tw.Flush()
}

// WriteTimelinePlot draws buckets in format "png" or "svg": offered,
// good, late, refused and failed requests a second over time on the top
// panel (targets named in its title), the gateway's cap (when known) on
// the bottom one.
func WriteTimelinePlot(w io.Writer, format string, targets Targets, bs []Bucket) error {
	if len(bs) == 0 {
		return fmt.Errorf("plot: no buckets")
	}
	top, bottom := plot.New(), plot.New()
	top.Title.Text = "Offered load and outcomes over time (" + targets.String() + ")"
	top.Y.Label.Text = "requests / s"
	bottom.Title.Text = "The gateway's cap"
	bottom.Y.Label.Text = "cap (requests)"
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Label.Text = "time since the start (s)"
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Min = 0
	}
	series := []struct {
		p    *plot.Plot
		name string
		c    color.Color
		dash []vg.Length
		y    func(Bucket) float64
	}{
		{top, "offered", grey, dashed, func(b Bucket) float64 { return b.Offered }},
		{top, "good", green, nil, func(b Bucket) float64 { return b.Good }},
		{top, "late", orange, nil, func(b Bucket) float64 { return b.Late }},
		{top, "refused", red, nil, func(b Bucket) float64 { return b.Refused }},
		{top, "failed", blue, dotted, func(b Bucket) float64 { return b.Failed }},
		{bottom, "cap", blue, nil, func(b Bucket) float64 { return b.Cap }},
	}
	for _, s := range series {
		var xy plotter.XYs
		for _, b := range bs {
			if v := s.y(b); !math.IsNaN(v) {
				xy = append(xy, plotter.XY{X: (b.Start + b.Width/2).Seconds(), Y: v})
			}
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = s.c
		l.Width, l.Dashes = vg.Points(1.5), s.dash
		s.p.Add(l)
		s.p.Legend.Add(s.name, l)
	}
	top.Y.Max *= 1.3
	bottom.Y.Max = math.Max(bottom.Y.Max*1.3, 1)
	width8, height := 10*vg.Inch, 7*vg.Inch
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(width8, height)}
	case "svg":
		c = vgsvg.New(width8, height)
	default:
		return fmt.Errorf("plot format %q: want png or svg", format)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, draw.New(c))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	_, err := c.WriteTo(w)
	return err
}
