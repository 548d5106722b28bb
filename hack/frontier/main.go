// Command frontier draws the savings frontier of docs/benchmarks/savings.md: GPU-minutes
// against pod-minutes over the memory allocation (OOM pod-minutes), for gpufrac under a
// sweep of its memory settings and for every baseline, on one trace and GPU size, after
// a warm-up. Every point is one simulate.Run, the code `gpufrac simulate` runs.
//
//	go run ./hack/frontier --input ../shared/data/gentd26 --gpu-memory 80Gi --out docs/benchmarks/frontier-80Gi.svg
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/simulate"
	"github.com/gpufrac/gpufrac/trace"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "frontier:", err)
		os.Exit(1)
	}
}

func run() error {
	input := flag.String("input", "../shared/data/gentd26", "GenTD26 directory")
	gpu := flag.String("gpu-memory", "80Gi", "memory of one GPU, a quantity")
	warmUp := flag.Duration("warm-up", 12*time.Hour, "history before counting starts")
	out := flag.String("out", "frontier.svg", "SVG file to write")
	flag.Parse()
	q, err := resource.ParseQuantity(*gpu)
	if err != nil {
		return fmt.Errorf("--gpu-memory %q: %w", *gpu, err)
	}
	tr, _, err := trace.ReadGenTD26(*input, trace.GenTD26Options{End: trace.GenTD26PublishedEnd})
	if err != nil {
		return err
	}
	base := simulate.Options{GPUMemoryBytes: q.Value(), WarmUp: *warmUp}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("GenTD26, %s GPUs, after %s of history", *gpu, *warmUp)
	p.X.Label.Text = "pod-minutes over the memory allocation (OOM), log scale of 1 + x"
	p.Y.Label.Text = "GPU-minutes ÷ one GPU per pod"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	point := func(r simulate.PolicyResult, one float64) plotter.XY {
		return plotter.XY{X: 1 + r.PodLimitOverrunMinutes, Y: r.GPUMinutes / one}
	}

	// Baselines, once.
	o := base
	o.Policies = simulate.DefaultPolicies
	res, err := simulate.Run(&tr, o)
	if err != nil {
		return err
	}
	one := res.Policies[0].GPUMinutes
	for _, r := range res.Policies {
		if r.Policy == simulate.PolicyGPUFrac {
			continue
		}
		s, err := plotter.NewScatter(plotter.XYs{point(r, one)})
		if err != nil {
			return err
		}
		p.Add(s)
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{point(r, one)}, Labels: []string{r.Policy}})
		if err != nil {
			return err
		}
		p.Add(l)
	}
	// gpufrac: memory headroom percent × packing-aware room (0: off).
	for _, fit := range []float64{-1, 1 << 30, 2 << 30} {
		var line plotter.XYs
		for _, h := range []int32{0, 5, 10, 15, 25} {
			o := base
			o.Policies = []string{simulate.PolicyGPUFrac}
			hh := h
			o.MemoryHeadroomPercent = &hh
			o.Recommender.Policy.FitMemoryHeadroomBytes = fit
			r, err := simulate.Run(&tr, o)
			if err != nil {
				return err
			}
			g := r.Policies[0]
			line = append(line, point(g, one))
			fmt.Printf("fit %s headroom %d%%: GPU-minutes %.0f (%.3f of one per pod) OOM pod-minutes %.0f (%d pods)\n",
				fitName(fit), h, g.GPUMinutes, g.GPUMinutes/one, g.PodLimitOverrunMinutes, g.PodsWithOverrun)
		}
		lp, sp, err := plotter.NewLinePoints(line)
		if err != nil {
			return err
		}
		p.Add(lp, sp)
		p.Legend.Add("gpufrac, headroom 0–25 %, fit room "+fitName(fit), lp, sp)
	}
	p.Y.Min = 0
	p.X.Max = math.Max(p.X.Max, 10)
	return p.Save(8*vg.Inch, 5*vg.Inch, *out)
}

func fitName(b float64) string {
	if b < 0 {
		return "off"
	}
	return resource.NewQuantity(int64(b), resource.BinarySI).String()
}
