// Command frontier draws the savings frontier of docs/benchmarks/savings.md: GPU-minutes
// as a multiple of clairvoyant-memory against the pod-minutes at risk of an
// out-of-memory crash, for every baseline and bound and for gpufrac under a sweep of the
// one lever that can go below the seen-peak bound: how soon the recommender forgets a
// memory peak (--memory-peak-window and --half-life). Each plot is one trace at one GPU size after a
// warm-up; every point is one simulate.Run, the code `gpufrac simulate` runs.
//
// The pod-minutes at risk are those over the pod's own memory allocation plus those of
// the tenants of a GPU whose tenants' memory summed above it (pods packed by a memory
// request below their limit): the simulator's podLimitOverrunMinutes +
// gpuOverrunPodMinutes.
//
// Two traces: the GenTD26 development subset (22.8 h: a peak of its first half does not
// come back inside the trace), and 4-day synthetic traces (a daily cycle: it does), whose
// points are summed over --synth-seeds.
//
//	go run ./hack/frontier --out-dir docs/benchmarks
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/simulate"
	"github.com/gpufrac/gpufrac/trace"
)

// goal is issue 12's goal, GPU-minutes ÷ clairvoyant-memory.
const goal = 1.15

// maxRatio is the largest GPU-minutes ÷ clairvoyant-memory a plot shows; the table has
// every point.
const maxRatio = 2.0

// forgetting is one point of the sweep: how long the recommender keeps a memory peak in
// the target and request (--memory-peak-window) and the half-life of its histograms
// (--half-life), whose p90 of per-interval peaks the target also never goes below.
type forgetting struct{ window, halfLife time.Duration }

// sweep is the forgetting swept, the defaults (history.DefaultPeakWindow,
// history.DefaultHalfLife: VPA's 24 h) first, then both at once, shorter and shorter.
var sweep = []forgetting{
	{history.DefaultPeakWindow, history.DefaultHalfLife},
	{24 * time.Hour, 24 * time.Hour},
	{12 * time.Hour, 12 * time.Hour},
	{6 * time.Hour, 6 * time.Hour},
	{2 * time.Hour, 2 * time.Hour},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "frontier:", err)
		os.Exit(1)
	}
}

// point is one policy's totals over the traces of one plot.
type point struct {
	name                string
	gpuMinutes, clair   float64
	podOver, gpuOverPod float64
	contention, pods    float64
}

func (p *point) add(r, clair simulate.PolicyResult) {
	p.gpuMinutes += r.GPUMinutes
	p.clair += clair.GPUMinutes
	p.podOver += r.PodLimitOverrunMinutes
	p.gpuOverPod += r.GPUOverrunPodMinutes
	p.contention += r.ContentionPodMinutes
	p.pods += r.PodMinutes
}

func (p point) ratio() float64 { return p.gpuMinutes / p.clair }
func (p point) risk() float64  { return p.podOver + p.gpuOverPod }

func run() error {
	input := flag.String("input", "../shared/data/gentd26", "GenTD26 directory")
	sizes := flag.String("gpu-memory", "80Gi,141Gi", "memory of one GPU, comma-separated quantities")
	warmUp := flag.Duration("warm-up", 12*time.Hour, "history before counting starts, GenTD26")
	synthWarmUp := flag.Duration("synth-warm-up", 24*time.Hour, "history before counting starts, synthetic traces")
	seeds := flag.Int("synth-seeds", 4, "synthetic traces, seeds 1 to this (4 days, 30 workloads × 2 pods, 30 % arriving)")
	outDir := flag.String("out-dir", "docs/benchmarks", "directory of the plots (frontier-<trace>-<size>.<format>)")
	format := flag.String("format", "svg", "plot file format: svg or png")
	only := flag.String("traces", "gentd26,synthetic", "traces to plot, comma-separated: gentd26, synthetic")
	flag.Parse()

	gentd, _, err := trace.ReadGenTD26(*input, trace.GenTD26Options{End: trace.GenTD26PublishedEnd})
	if err != nil {
		return err
	}
	var synth []trace.Trace
	for s := 1; s <= *seeds; s++ {
		o := trace.SynthReplayOptions()
		o.Workloads, o.PodsPerWorkload, o.Duration, o.Seed = 30, 2, 96*time.Hour, uint64(s)
		o.Model.ArrivingWorkloads = 0.3
		synth = append(synth, trace.Synthesize(o))
	}
	fmt.Println("| trace, GPU, warm-up | policy | GPU-min ÷ clairvoyant-memory | pod-min over the pod's allocation | pod-min on a GPU over its memory | contention |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, size := range strings.Split(*sizes, ",") {
		q, err := resource.ParseQuantity(strings.TrimSpace(size))
		if err != nil {
			return fmt.Errorf("--gpu-memory %q: %w", size, err)
		}
		for _, set := range []struct {
			name   string
			traces []trace.Trace
			warmUp time.Duration
		}{
			{"gentd26", []trace.Trace{gentd}, *warmUp},
			{"synthetic", synth, *synthWarmUp},
		} {
			if !strings.Contains(*only, set.name) {
				continue
			}
			title := fmt.Sprintf("%s, %s GPUs, after %s of history", set.name, size, set.warmUp)
			if set.name == "synthetic" {
				title = fmt.Sprintf("synthetic 4-day traces (seeds 1–%d summed), %s GPUs, after %s", *seeds, size, set.warmUp)
			}
			base, line, err := frontier(set.traces, simulate.Options{GPUMemoryBytes: q.Value(), WarmUp: set.warmUp})
			if err != nil {
				return err
			}
			for _, p := range append(base, line...) {
				fmt.Printf("| %s | %s | %.3f× | %.0f | %.0f | %.2f %% |\n", title, p.name, p.ratio(), p.podOver, p.gpuOverPod, 100*p.contention/p.pods)
			}
			out := filepath.Join(*outDir, fmt.Sprintf("frontier-%s-%s.%s", set.name, size, *format))
			if err := drawFrontier(title, base, line, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// frontier replays traces with the default policies (base: one point each, summed over
// the traces) and gpufrac at each forgetting of the sweep (line).
func frontier(traces []trace.Trace, o simulate.Options) (base, line []point, err error) {
	o.Policies = simulate.DefaultPolicies
	idx := map[string]int{}
	for i := range traces {
		res, err := simulate.Run(&traces[i], o)
		if err != nil {
			return nil, nil, err
		}
		clair := find(res, simulate.PolicyClairvoyantMemory)
		for _, r := range res.Policies {
			j, ok := idx[r.Policy]
			if !ok {
				j = len(base)
				idx[r.Policy] = j
				base = append(base, point{name: r.Policy})
			}
			base[j].add(r, clair)
		}
	}
	// The sweep's first point is the defaults, which the baselines' runs replayed.
	def := base[idx[simulate.PolicyGPUFrac]]
	def.name = sweepName(sweep[0])
	line = append(line, def)
	for _, f := range sweep[1:] {
		p := point{name: sweepName(f)}
		for i := range traces {
			oo := o
			oo.Policies = []string{simulate.PolicyGPUFrac, simulate.PolicyClairvoyantMemory}
			oo.Recommender.History.PeakWindow = f.window
			oo.Recommender.History.HalfLife = f.halfLife
			res, err := simulate.Run(&traces[i], oo)
			if err != nil {
				return nil, nil, err
			}
			p.add(find(res, simulate.PolicyGPUFrac), find(res, simulate.PolicyClairvoyantMemory))
		}
		line = append(line, p)
	}
	return base, line, nil
}

// sweepName names gpufrac at forgetting f.
func sweepName(f forgetting) string {
	return fmt.Sprintf("gpufrac, peak window %s, half-life %s", shortDuration(f.window), shortDuration(f.halfLife))
}

func find(res *simulate.Result, name string) simulate.PolicyResult {
	for _, r := range res.Policies {
		if r.Policy == name {
			return r
		}
	}
	return simulate.PolicyResult{}
}

// drawFrontier writes the plot: baselines and bounds as labelled points, gpufrac's sweep as a
// line from the default window to the shortest, the goal as a horizontal line.
func drawFrontier(title string, base, sweep []point, out string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "1 + pod-minutes at risk of an OOM (over the pod's allocation, or on a GPU over its memory), log scale"
	p.Y.Label.Text = "GPU-minutes ÷ clairvoyant-memory"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	xy := func(q point) plotter.XY { return plotter.XY{X: 1 + q.risk(), Y: q.ratio()} }
	var pts plotter.XYs
	var labels []string
	for _, q := range base {
		if q.ratio() > maxRatio {
			continue // off the scale that matters (one-per-pod, clairvoyant-peak at 141 GiB): in the table
		}
		pts = append(pts, xy(q))
		labels = append(labels, q.name)
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
	if err != nil {
		return err
	}
	p.Add(s, l)
	var line plotter.XYs
	for _, q := range sweep {
		line = append(line, xy(q))
	}
	lp, sp, err := plotter.NewLinePoints(line)
	if err != nil {
		return err
	}
	sp.Shape = draw.PyramidGlyph{}
	p.Add(lp, sp)
	p.Legend.Add("gpufrac by memory peak window = half-life: 7d/24h (default), 24h, 12h, 6h, 2h (figures: the bench's table)", lp, sp)
	maxX := 10.0
	for _, q := range append(pts, line...) {
		maxX = math.Max(maxX, q.X)
	}
	g, err := plotter.NewLine(plotter.XYs{{X: 1, Y: goal}, {X: maxX, Y: goal}})
	if err != nil {
		return err
	}
	g.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(g)
	p.Legend.Add(fmt.Sprintf("issue 12's goal, %.2f×", goal), g)
	p.Legend.Top = true
	p.Y.Min = 0.9
	return p.Save(10*vg.Inch, 6*vg.Inch, out)
}

// shortDuration writes whole days as "7d", else as time.Duration without zero units.
func shortDuration(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}
