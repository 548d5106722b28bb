// Command benchwebhook measures gpufrac's pod webhook side by side with the Vertical Pod
// Autoscaler's admission controller on one real local API server (`make bench-webhook`,
// issue 17 item 2).
//
// It starts the e2e cluster (e2e/framework), registers both webhooks on it, each for its
// own namespace, and creates pods owned by a replicas-0 Deployment (so that both webhooks
// act: gpufrac writes its recommended fraction, VPA its recommended requests) at each
// rate, in runs of -pods pods repeated -repeats times, alternating the webhooks (and a
// namespace no webhook sees, the API server's own cost). It prints Markdown tables of
// client-side pod-create latency and each webhook's server-side latency, read from the
// webhooks' own /metrics and the API server's. Figures go to docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

type options struct {
	rates       []float64
	pods        int
	repeats     int
	maxInFlight int
	baseline    bool
	// matchConditions adds the noGPU target.
	matchConditions bool
	dir             string
	binDir          string
	vpaCRDs         string
	output          string
	keep            bool
	// gpufracEnv is added to the environment of gpufrac's webhook process only
	// (KEY=VALUE pairs, e.g. GOGC=400): runtime settings measured against the default.
	gpufracEnv []string
}

func main() {
	var o options
	rates := flag.String("rates", "50,200", "Pod creations per second, comma-separated; each rate is one table.")
	flag.IntVar(&o.pods, "pods", 2000, "Pods created per run.")
	flag.IntVar(&o.repeats, "repeats", 3, "Runs per webhook and rate.")
	flag.IntVar(&o.maxInFlight, "max-in-flight", 256, "Most pod creations in flight at once; past it the load generator waits and the achieved rate falls below -rates.")
	flag.BoolVar(&o.baseline, "baseline", true, "Also create pods in a namespace no webhook sees (the API server's own cost).")
	flag.BoolVar(&o.matchConditions, "match-conditions", true, "Also create pods without a GPU in a namespace gpufrac's webhook selects: its matchConditions skip them, and the API server records their evaluation time.")
	flag.StringVar(&o.dir, "dir", "_out/benchwebhook", "Working directory: the cluster, certificates and logs (recreated).")
	flag.StringVar(&o.binDir, "bin", "bin", "Directory with the cluster's binaries, admission and vpa-admission-controller.")
	flag.StringVar(&o.vpaCRDs, "vpa-crds", "", "VPA's CRD manifest (deploy/vpa-v1-crd-gen.yaml of the VPA module that built vpa-admission-controller). Required.")
	flag.StringVar(&o.output, "output", "", "Also write the Markdown report to this file.")
	flag.Func("gpufrac-env", "KEY=VALUE added to the environment of gpufrac's webhook only (repeatable; e.g. GOGC=400).", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q: want KEY=VALUE", v)
		}
		o.gpufracEnv = append(o.gpufracEnv, v)
		return nil
	})
	flag.BoolVar(&o.keep, "keep", false, "Leave the cluster running at the end (stop it with go run ./e2e/cluster down --dir DIR/cluster).")
	flag.Parse()
	var err error
	if o.rates, err = parseRates(*rates); err == nil && (o.pods <= 0 || o.repeats <= 0 || o.maxInFlight <= 0) {
		err = fmt.Errorf("-pods, -repeats and -max-in-flight must be positive")
	}
	if err == nil && o.vpaCRDs == "" {
		err = fmt.Errorf("-vpa-crds is required")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchwebhook:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "benchwebhook:", err)
		os.Exit(1)
	}
}

// profile records t's CPU profile for the duration of one run at rate r (-pods ÷ r
// seconds) into DIR/profile-<name>-<rate>.pprof (go tool pprof -top); the channel
// reports the result once the profile is written.
func profile(ctx context.Context, t *target, r float64, o options) <-chan error {
	done := make(chan error, 1)
	secs := max(1, int(float64(o.pods)/r))
	path := filepath.Join(o.dir, fmt.Sprintf("profile-%s-%g.pprof", t.name, r))
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%sprofile?seconds=%d", t.pprofURL, secs), nil)
		if err != nil {
			done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, b)
		}
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
			logf("CPU profile of %s at %g/s: %s", t.name, r, path)
		}
		done <- err
	}()
	return done
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive number", f)
		}
		out = append(out, r)
	}
	return out, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, o options) error {
	var err error
	if o.dir, err = filepath.Abs(o.dir); err != nil {
		return err
	}
	if o.binDir, err = filepath.Abs(o.binDir); err != nil {
		return err
	}
	begin := time.Now()
	c, err := framework.Start(ctx, framework.Options{
		Dir: filepath.Join(o.dir, "cluster"), BinDir: o.binDir, GPUNodes: -1,
		Logf: func(f string, a ...any) { logf("cluster: "+f, a...) },
	})
	if err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			if err := c.Stop(); err != nil {
				logf("stopping the cluster: %v", err)
			}
		}()
	}
	targets, err := setUp(ctx, c, o)
	if err != nil {
		return err
	}
	logf("set up in %v; logs in %s", time.Since(begin).Round(time.Second), filepath.Join(c.Dir, "logs"))
	results := map[float64][]*result{}
	for _, r := range o.rates {
		byTarget := map[string]*result{}
		for rep := range o.repeats {
			// Rotate the order so that no webhook always runs first after a rate change.
			for i := range targets {
				t := targets[(i+rep)%len(targets)]
				res := byTarget[t.name]
				if res == nil {
					res = &result{target: t}
					byTarget[t.name] = res
					results[r] = append(results[r], res)
				}
				var profiled <-chan error
				if rep == 0 && t.pprofURL != "" {
					profiled = profile(ctx, t, r, o)
				}
				if err := measure(ctx, c, t, r, o, res); err != nil {
					return fmt.Errorf("%s at %g/s, run %d: %w", t.name, r, rep+1, err)
				}
				if profiled != nil {
					if err := <-profiled; err != nil {
						logf("CPU profile of %s at %g/s: %v", t.name, r, err)
					}
				}
			}
		}
	}
	report := markdown(o, results)
	fmt.Print(report)
	if o.output != "" {
		return os.WriteFile(o.output, []byte(report), 0o644)
	}
	return nil
}
