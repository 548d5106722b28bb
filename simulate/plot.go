package simulate

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// policyColors are the line colours of the policies, in DefaultPolicies order (a
// colour-blind-safe palette, Okabe and Ito 2008), then grey for others.
var policyColors = map[string]color.RGBA{
	PolicyOnePerPod:         {0, 0, 0, 255},
	TimeSlicing(2):          {230, 159, 0, 255},
	TimeSlicing(4):          {86, 180, 233, 255},
	PolicyVPAMemory:         {0, 158, 115, 255},
	PolicyGPUFrac:           {213, 94, 0, 255},
	PolicyClairvoyant:       {0, 114, 178, 255},
	PolicyClairvoyantMemory: {204, 121, 167, 255},
	PolicyClairvoyantSeen:   {240, 228, 66, 255},
}

func colorOf(name string) color.RGBA {
	if c, ok := policyColors[name]; ok {
		return c
	}
	return color.RGBA{128, 128, 128, 255}
}

// WritePlots writes the result's plots into dir as <prefix>-<name>.<format> for each
// format ("svg", "png"): GPUs held over time per policy, memory limit vs used memory of
// three pods, and the distribution of memory headroom. It returns the files written
// (the first format's, for linking) and the first error.
func (res *Result) WritePlots(dir, prefix string, formats []string) ([]PlotFile, error) {
	if res.detail == nil {
		return nil, fmt.Errorf("result has no per-step data to plot")
	}
	if len(formats) == 0 {
		formats = []string{"svg"}
	}
	gib := GiB(res.GPUMemoryBytes)
	type fig struct {
		name, title string
		w, h        vg.Length
		draw        func(draw.Canvas) error
	}
	figs := []fig{
		{"gpus", fmt.Sprintf("GPUs held over time per policy, %s GPUs", gib), 18 * vg.Centimeter, 10 * vg.Centimeter, res.drawGPUs},
		{"memory", fmt.Sprintf("Memory limit vs used GPU memory of three pods, %s GPUs", gib), 18 * vg.Centimeter, 20 * vg.Centimeter, res.drawMemory},
		{"headroom", fmt.Sprintf("Distribution of memory headroom (memory limit minus use) per pod-minute, %s GPUs", gib), 18 * vg.Centimeter, 10 * vg.Centimeter, res.drawHeadroom},
	}
	var out []PlotFile
	for _, f := range figs {
		for i, format := range formats {
			c, err := draw.NewFormattedCanvas(f.w, f.h, format)
			if err != nil {
				return out, err
			}
			if err := f.draw(draw.New(c)); err != nil {
				return out, err
			}
			path := filepath.Join(dir, fmt.Sprintf("%s-%s.%s", prefix, f.name, format))
			file, err := os.Create(path)
			if err != nil {
				return out, err
			}
			if _, err := c.WriteTo(file); err != nil {
				file.Close()
				return out, fmt.Errorf("%s: %w", path, err)
			}
			if err := file.Close(); err != nil {
				return out, err
			}
			if i == 0 {
				out = append(out, PlotFile{Path: path, Title: f.title})
			}
		}
	}
	return out, nil
}

func (res *Result) hours(step int) float64 {
	d := res.detail
	return float64(step+1-d.first) * d.stepMinutes / 60
}

// addPolicyLine adds a line through pts to p, in the policy's colour (dashed for the
// clairvoyant bounds), named by the policy in the legend.
func addPolicyLine(p *plot.Plot, pts plotter.XYs, name string) (*plotter.Line, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color = colorOf(name)
	l.Width = vg.Points(1.2)
	if IsBound(name) {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return l, nil
}

// hoursLabel is the x axis of the plots over time.
const hoursLabel = "hours since the start of the evaluation"

// newPlot returns a plot with a title, axis labels and its legend at the top right.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	return p
}

func (res *Result) drawGPUs(c draw.Canvas) error {
	d := res.detail
	p := newPlot(fmt.Sprintf("GPUs held (%s GPUs)", GiB(res.GPUMemoryBytes)), hoursLabel, "GPUs held")
	for pi, pr := range res.Policies {
		// A step line through the changes only: the count changes rarely.
		var pts plotter.XYs
		gs := d.gpus[pi]
		for i, g := range gs {
			if i == 0 || g != gs[i-1] || i == len(gs)-1 {
				pts = append(pts, plotter.XY{X: res.hours(d.first + i - 1), Y: float64(g)})
			}
		}
		l, err := addPolicyLine(p, pts, pr.Policy)
		if err != nil {
			return err
		}
		l.StepStyle = plotter.PostStep
	}
	p.Y.Min = 0
	p.Y.Max *= 1.6 // room for the legend above the lines
	p.Draw(c)
	return nil
}

// plotRuns picks up to three pods to show: the pod with the most gpufrac memory
// overrun minutes (if any), the longest-lived pod with the median peak, and the
// longest-lived pod that arrived after the evaluation started.
func (res *Result) plotRuns() []int {
	d := res.detail
	gf := -1
	for pi, pr := range res.Policies {
		if pr.Policy == PolicyGPUFrac {
			gf = pi
		}
	}
	life := func(i int) int { return d.runs[i].end - max(d.runs[i].start, d.first) }
	var out []int
	has := func(i int) bool {
		for _, j := range out {
			if j == i {
				return true
			}
		}
		return false
	}
	if gf >= 0 {
		best := -1
		for i, n := range d.overrun[gf] {
			if n > 0 && (best < 0 || n > d.overrun[gf][best]) {
				best = i
			}
		}
		if best >= 0 {
			out = append(out, best)
		}
	}
	var long []int
	maxLife := 0
	for i := range d.runs {
		if d.runs[i].end >= d.first {
			maxLife = max(maxLife, life(i))
		}
	}
	for i := range d.runs {
		if d.runs[i].end >= d.first && life(i) >= maxLife*9/10 {
			long = append(long, i)
		}
	}
	sort.SliceStable(long, func(a, b int) bool { return d.runs[long[a]].peakMem < d.runs[long[b]].peakMem })
	if len(long) > 0 && !has(long[len(long)/2]) {
		out = append(out, long[len(long)/2])
	}
	late := -1
	for i := range d.runs {
		if d.runs[i].start > d.first && !has(i) && (late < 0 || life(i) > life(late)) {
			late = i
		}
	}
	if late >= 0 {
		out = append(out, late)
	}
	for i := 0; len(out) < 3 && i < len(long); i++ {
		if !has(long[i]) {
			out = append(out, long[i])
		}
	}
	return out
}

func (res *Result) drawMemory(c draw.Canvas) error {
	d := res.detail
	runs := res.plotRuns()
	if len(runs) == 0 {
		return nil
	}
	show := map[string]bool{PolicyGPUFrac: true, PolicyVPAMemory: true, PolicyClairvoyant: true, TimeSlicing(2): true}
	plots := make([][]*plot.Plot, len(runs))
	for row, i := range runs {
		r := d.runs[i]
		p := newPlot(r.name, hoursLabel, "GiB")
		from := max(r.start, d.first)
		used := make(plotter.XYs, 0, r.end-from+1)
		for k := from; k <= r.end; k++ {
			used = append(used, plotter.XY{X: res.hours(k), Y: r.mem[k-r.start] / (1 << 30)})
		}
		l, err := plotter.NewLine(used)
		if err != nil {
			return err
		}
		l.Color = color.RGBA{110, 110, 110, 255}
		l.Width = vg.Points(0.8)
		p.Add(l)
		p.Legend.Add("used", l)
		for pi, pr := range res.Policies {
			if !show[pr.Policy] || len(d.changes[pi][i]) == 0 {
				continue
			}
			var pts plotter.XYs
			for ci, ch := range d.changes[pi][i] {
				x := res.hours(ch.step - 1)
				if ci > 0 {
					pts = append(pts, plotter.XY{X: x, Y: pts[len(pts)-1].Y})
				}
				pts = append(pts, plotter.XY{X: x, Y: float64(ch.limit) / (1 << 30)})
			}
			pts = append(pts, plotter.XY{X: res.hours(r.end), Y: pts[len(pts)-1].Y})
			if _, err := addPolicyLine(p, pts, pr.Policy); err != nil {
				return err
			}
		}
		p.Y.Min = 0
		p.Y.Max = float64(res.GPUMemoryBytes) / (1 << 30) * 1.7 // room for the legend
		plots[row] = []*plot.Plot{p}
	}
	t := draw.Tiles{Rows: len(runs), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: vg.Millimeter}
	canvases := plot.Align(plots, t, c)
	for row := range plots {
		plots[row][0].Draw(canvases[row][0])
	}
	return nil
}

func (res *Result) drawHeadroom(c draw.Canvas) error {
	d := res.detail
	p := newPlot(fmt.Sprintf("Memory headroom per pod-minute (%s GPUs); below 0: over the limit", GiB(res.GPUMemoryBytes)),
		"memory limit minus used GPU memory, GiB", "share of pod-minutes at or below")
	p.Legend.Left = true
	capGiB := float64(res.GPUMemoryBytes) / (1 << 30)
	for pi, pr := range res.Policies {
		h := d.headroom[pi]
		var total int64
		for _, n := range h {
			total += n
		}
		if total == 0 {
			continue
		}
		var pts plotter.XYs
		var cum int64
		for b, n := range h {
			cum += n
			x := (float64(b+1)*d.binBytes - float64(res.GPUMemoryBytes)) / (1 << 30)
			if x < -10 || x > capGiB {
				continue
			}
			// Keep the ends of flat stretches only.
			if k := len(pts); k >= 2 && pts[k-1].Y == pts[k-2].Y && float64(cum)/float64(total) == pts[k-1].Y {
				pts[k-1].X = x
				continue
			}
			pts = append(pts, plotter.XY{X: x, Y: float64(cum) / float64(total)})
		}
		if len(pts) == 0 {
			continue
		}
		if _, err := addPolicyLine(p, pts, pr.Policy); err != nil {
			return err
		}
	}
	p.Y.Min, p.Y.Max = 0, 1.6 // room for the legend above the lines
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"}, {Value: 0.75}, {Value: 1, Label: "1"}})
	p.X.Min = math.Max(-10, p.X.Min)
	p.Draw(c)
	return nil
}
