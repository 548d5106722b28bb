// Command benchrules measures what the gpufrac-history recording rules save a history
// bootstrap (docs/benchmarks.md): on a real Prometheus holding synthetic per-minute DCGM
// series (trace.Synthesize), backfilled with promtool, it records the dcgm source's
// rules over the same history with `promtool tsdb create-blocks-from rules`, then runs
// each bootstrap read the recommender sends (memory peaks per hour, flatness per hour,
// compute per minute; the robust form and the raw form SplitQuery uses for clean
// namespaces) beside the same read of the recorded series, and reports, per query, the
// samples Prometheus scanned (stats totalQueryableSamples), its evaluation time, and
// whether the answers are equal. With -bootstrap it also times the recommender's own
// history bootstrap (its first cycle, every autoscaler of the trace in a fake API
// server) reading the raw series and with --history-from-recordings, and compares their
// memory targets; -dirty adds one impossible memory sample to the namespace, so the raw
// memory reads take the robust form; -remote-read=false has the raw-sample reads go
// through the query API (a backend without Prometheus' remote read API); -reuse keeps
// the series and recordings a previous run with the same flags left. Run from the
// repository root:
//
//	PODS=1000 DAYS=1 go run ./hack/benchrules
//	go run ./hack/benchrules -pods 1000 -days 1 -reads=false -bootstrap -dirty
//
// It needs prometheus and promtool in PATH (Debian's prometheus package, `make deps`).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/e2e/framework"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/trace"
)

const namespace = "bench"

type options struct {
	pods, perWorkload, repeats int
	history                    time.Duration
	out                        string
	// reads: time each bootstrap read; bootstrap: time the recommender's history
	// bootstrap raw and from the recordings; dirty: one impossible memory sample in the
	// namespace, so the raw memory reads take the robust form.
	reads, bootstrap, dirty bool
	// reuse: keep the series and recordings a previous run left in out (same flags).
	reuse bool
}

func main() {
	var o options
	flag.IntVar(&o.pods, "pods", envInt("PODS", 1000), "GPU pods (env PODS)")
	flag.IntVar(&o.perWorkload, "pods-per-workload", 5, "pods per Deployment")
	days := flag.Int("days", envInt("DAYS", 1), "days of per-minute history (env DAYS)")
	flag.IntVar(&o.repeats, "repeats", 3, "runs of each query; the fastest is reported")
	flag.StringVar(&o.out, "out", "_out/bench-rules", "working directory (removed first)")
	flag.BoolVar(&o.reads, "reads", true, "time each bootstrap read, raw and recorded")
	flag.BoolVar(&o.bootstrap, "bootstrap", false, "time the recommender's history bootstrap reading the raw series and with --history-from-recordings (repeats runs each)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "with -bootstrap, write a CPU profile (pprof) of this process over the last bootstrap from the recordings: the recommender's side")
	flag.BoolVar(&profileRaw, "cpuprofile-raw", false, "with -cpuprofile, profile the last bootstrap reading the raw series instead")
	flag.BoolVar(&o.reuse, "reuse", false, "reuse the series and recordings a previous run with the same -pods, -days and -dirty left in -out (skips the synthesis, backfill and recordings)")
	flag.BoolVar(&remoteRead, "remote-read", true, "with -bootstrap, read raw samples through Prometheus' remote read API (false: through the query API, as a backend without it)")
	flag.BoolVar(&o.dirty, "dirty", false, "add one impossible memory sample (a DCGM blank sentinel) in the namespace: the raw memory reads take the robust form")
	flag.Parse()
	o.history = time.Duration(*days) * 24 * time.Hour
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "benchrules:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func run(ctx context.Context, o options) error {
	data := filepath.Join(o.out, "data")
	// Whole hours, ending an hour ago: every window of the reads is complete.
	end := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	marker := filepath.Join(o.out, "prepared")
	var rows []row
	reused := false
	if b, err := os.ReadFile(marker); err == nil && o.reuse {
		if end, err = time.Parse(time.RFC3339, strings.TrimSpace(string(b))); err != nil {
			return fmt.Errorf("%s: %w", marker, err)
		}
		reused = true
		logf("reusing the series and recordings of %s, ending %s", o.out, end.Format(time.RFC3339))
	}
	start := end.Add(-o.history)
	t := trace.Synthesize(trace.SynthOptions{Workloads: o.pods / o.perWorkload, PodsPerWorkload: o.perWorkload,
		Duration: o.history + time.Hour, Step: time.Minute, Seed: 1, End: end, Namespace: namespace})
	if !reused {
		var err error
		if rows, err = prepare(ctx, o, t, data, start, end); err != nil {
			return err
		}
		if err := os.WriteFile(marker, []byte(end.Format(time.RFC3339)+"\n"), 0o644); err != nil {
			return err
		}
	}
	p, err := startPrometheus(ctx, o.out, data)
	if err != nil {
		return err
	}
	defer p.stop()
	var measured []row
	if o.reads {
		if measured, err = measure(ctx, p.url, start, end, o.repeats); err != nil {
			return err
		}
	}
	if o.bootstrap {
		b, err := bootstrap(ctx, p.url, p.cmd.Process.Pid, t, end, o.history, o.repeats)
		if err != nil {
			return err
		}
		measured = append(measured, b...)
	}
	fmt.Printf("%d pods, %s of per-minute history ending %s (reads from %s)\n\n", o.pods, o.history, end.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
	fmt.Println("| read | samples scanned | eval time | points | answer |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range append(rows, measured...) {
		fmt.Printf("| %s | %s | %.2f s | %s | %s |\n", r.name, r.samples, r.evalS, r.points, r.equal)
	}
	return nil
}

// prepare empties o.out, backfills t's series into data (with -dirty, the impossible
// sample too) and records the history rules over [start, end] beside them; it returns
// the recordings' rows (Prometheus CPU of each pass).
func prepare(ctx context.Context, o options, t trace.Trace, data string, start, end time.Time) ([]row, error) {
	if err := os.RemoveAll(o.out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	logf("synthesized %d pods × %s ending %s", o.pods, o.history, end.Format(time.RFC3339))
	om := filepath.Join(o.out, "synth.om")
	f, err := os.Create(om)
	if err != nil {
		return nil, err
	}
	err = trace.WriteOpenMetrics(f, t, trace.OpenMetricsOptions{})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := command(ctx, "promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", om, data); err != nil {
		return nil, err
	}
	if o.dirty {
		dirty := filepath.Join(o.out, "dirty.om")
		if err := writeDirty(dirty, end.Add(-o.history/2)); err != nil {
			return nil, err
		}
		if err := command(ctx, "promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", dirty, data); err != nil {
			return nil, err
		}
	}
	logf("backfilled the raw series in %s", time.Since(began).Round(time.Second))
	os.Remove(om)

	// Both passes use one rule file path and group name, so one evaluation phase (the
	// group's offset within the minute, which promtool takes as Prometheus does), as the
	// one group of rules/gpufrac.rules.yaml.
	file := filepath.Join(o.out, "history.rules.yaml")
	var rows []row
	for _, pass := range []string{"minute", "hour"} {
		if err := ruleFile(file, pass == "hour"); err != nil {
			return nil, err
		}
		p, err := startPrometheus(ctx, o.out, data)
		if err != nil {
			return nil, err
		}
		blocks := filepath.Join(o.out, "rules-"+pass)
		began := time.Now()
		err = command(ctx, "promtool", "tsdb", "create-blocks-from", "rules", "--url", p.url, "--output-dir", blocks,
			"--eval-interval", "1m", "--start", strconv.FormatInt(start.Unix(), 10), "--end", strconv.FormatInt(end.Unix(), 10), file)
		cpu := p.stop()
		if err != nil {
			return nil, err
		}
		logf("recorded the %s rules over the history: %s wall, Prometheus CPU %.1f s", pass, time.Since(began).Round(time.Second), cpu)
		rows = append(rows, row{name: "recording the " + pass + " rules over the whole history (promtool backfill; Prometheus CPU)", evalS: cpu})
		if err := moveBlocks(blocks, data); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// writeDirty writes an OpenMetrics file of one series of the namespace, of a pod no
// workload owns, with a DCGM blank sentinel among valid samples around at: backfilled
// beside the trace (a block of its own), the namespace then holds an impossible memory
// sample (metrics.Reader.DirtyNamespaces).
func writeDirty(path string, at time.Time) error {
	var d strings.Builder
	fmt.Fprintf(&d, "# TYPE %s gauge\n", metrics.DCGMFBUsed)
	for i, v := range []string{"1000", "9223372036854775794", "1000"} {
		fmt.Fprintf(&d, "%s{namespace=%q,pod=\"dirty-0\",container=\"main\",UUID=\"GPU-dirty\"} %s %d\n", metrics.DCGMFBUsed, namespace, v, at.Add(time.Duration(i)*time.Minute).Unix())
	}
	d.WriteString("# EOF\n")
	return os.WriteFile(path, []byte(d.String()), 0o644)
}

// row is one measured read.
type row struct {
	name, samples, points, equal string
	evalS                        float64
}

// ruleFile writes the dcgm source's minute rules, or with hour the hourly rules, of
// metrics.HistoryRules into the rule file (promtool's rules backfill cannot read what
// another rule of the same run records).
func ruleFile(path string, hour bool) error {
	type rule struct {
		Record string            `json:"record"`
		Expr   string            `json:"expr"`
		Labels map[string]string `json:"labels,omitempty"`
	}
	var rules []rule
	for _, r := range metrics.HistoryRules() {
		switch {
		case !hour && r.Source == metrics.DCGM{}.Name():
			rules = append(rules, rule{Record: r.Record, Expr: r.Expr, Labels: map[string]string{metrics.HistorySourceLabel: r.Source}})
		case hour && r.Source == "":
			rules = append(rules, rule{Record: r.Record, Expr: r.Expr})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "gpufrac-history", "interval": "1m", "rules": rules}}})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// moveBlocks moves the TSDB blocks promtool wrote into Prometheus' data directory.
func moveBlocks(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func command(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// prom is a running Prometheus without scrape targets.
type prom struct {
	cmd *exec.Cmd
	url string
}

func startPrometheus(ctx context.Context, dir, data string) (*prom, error) {
	ports, err := framework.FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global: {}\n"), 0o644); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "prometheus.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "prometheus", "--config.file="+cfg, "--storage.tsdb.path="+data,
		"--storage.tsdb.retention.time=400d", "--web.listen-address="+addr, "--query.timeout=10m")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &prom{cmd: cmd, url: "http://" + addr}
	for range 600 {
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.stop()
	return nil, fmt.Errorf("prometheus at %s not ready in 60 s (log: %s)", addr, log.Name())
}

// recordingPhase returns how far past each whole minute the minute recordings are
// stamped (the rule group's evaluation offset).
func recordingPhase(ctx context.Context, base string, end time.Time) (time.Duration, error) {
	c, err := api.NewClient(api.Config{Address: base})
	if err != nil {
		return 0, err
	}
	v, _, _, err := promv1.NewAPI(c).Query(ctx, fmt.Sprintf("max(timestamp(%s))", metrics.HistoryCompute1m), end)
	if err != nil {
		return 0, err
	}
	vec, ok := v.(model.Vector)
	if !ok || len(vec) != 1 {
		return 0, fmt.Errorf("no %s recorded before %s", metrics.HistoryCompute1m, end)
	}
	ms := int64(math.Round(float64(vec[0].Value) * 1000))
	return time.Duration(ms%60000) * time.Millisecond, nil
}

// stop stops Prometheus and returns the CPU seconds it used.
func (p *prom) stop() float64 {
	p.cmd.Process.Signal(os.Interrupt)
	p.cmd.Wait()
	if s := p.cmd.ProcessState; s != nil {
		return (s.UserTime() + s.SystemTime()).Seconds()
	}
	return 0
}

// read is one range query of the bootstrap: the recommender's, or the same over the
// recorded series.
type read struct {
	name, query string
	step        time.Duration
	// against names the read whose answer this one should equal ("" for none).
	against string
	// clock: read at the whole hours and minutes the recommender steps at, not at the
	// recording's phase.
	clock bool
}

func measure(ctx context.Context, base string, start, end time.Time, repeats int) ([]row, error) {
	sel := metrics.Selector{Labels: metrics.DefaultLabels, Namespaces: []string{namespace}, Device: metrics.DCGM{}.DeviceLabels()}
	raw := sel
	raw.Raw = true
	src := metrics.DCGM{}
	rec := func(name string) string {
		return fmt.Sprintf(`%s{%s="dcgm",namespace=~%q}`, name, metrics.HistorySourceLabel, metrics.NamespaceRegex(sel.Namespaces))
	}
	// The recorded series carry the rules' source label; the reader's answers do not.
	drop := func(q string) string { return fmt.Sprintf(`max without (%s) (%s)`, metrics.HistorySourceLabel, q) }
	hour, minute := time.Hour, time.Minute
	const (
		memRobust = "memory peaks per hour, robust (raw series)"
		memHourly = "memory peaks per hour, recorded hourly"
		cpuRobust = "compute per minute, robust (raw series)"
		cpuRec    = "compute per minute, recorded"
	)
	reads := []read{
		{name: memRobust, query: src.MemoryPeakQuery(sel, hour), step: hour},
		{name: "memory peaks per hour, clean namespaces (raw series)", query: src.MemoryPeakQuery(raw, hour), step: hour, against: memRobust},
		{name: "memory peaks per hour from the minute recordings", query: drop(fmt.Sprintf("max_over_time(%s[3570s])", rec(metrics.HistoryMemoryMax1m))), step: hour, against: memRobust},
		{name: memHourly, query: drop(fmt.Sprintf("last_over_time(%s[30s])", rec(metrics.HistoryMemoryMax1h))), step: hour, against: memRobust},
		{name: "memory peaks per hour, robust (raw series), at whole hours", query: src.MemoryPeakQuery(sel, hour), step: hour, against: memHourly, clock: true},
		{name: "memory flatness per hour, robust (raw series, stddev)", query: metrics.FlatQuery(src, sel, hour), step: hour},
		{name: "memory flatness per hour, recorded hourly (max − min)", query: fmt.Sprintf("max without (%s, %s) (last_over_time(%s[30s]) - last_over_time(%s[30s]))",
			metrics.HistorySourceLabel, metrics.SourceLabel, rec(metrics.HistoryMemoryMax1h), rec(metrics.HistoryMemoryMin1h)), step: hour, against: "flat"},
		{name: cpuRobust, query: src.ComputeQuery(sel, minute), step: minute},
		{name: "compute per minute, clean namespaces (raw series)", query: src.ComputeQuery(raw, minute), step: minute, against: cpuRobust},
		{name: cpuRec, query: drop(fmt.Sprintf("last_over_time(%s[30s])", rec(metrics.HistoryCompute1m))), step: minute, against: cpuRobust},
		{name: "compute per minute, robust (raw series), at whole minutes", query: src.ComputeQuery(sel, minute), step: minute, against: cpuRec, clock: true},
	}
	// The recordings' phase: the group's evaluations are this far past each whole minute.
	phase, err := recordingPhase(ctx, base, end)
	if err != nil {
		return nil, err
	}
	logf("the recordings are evaluated %s past each minute", phase)
	answers := map[string]map[string]float64{}
	var rows []row
	for _, r := range reads {
		from, to := start.Add(hour).Add(phase), end.Add(-hour).Add(phase)
		if r.clock {
			from, to = start.Add(hour), end.Add(-hour)
		}
		var best stats
		var answer map[string]float64
		for i := range repeats {
			s, a, err := queryRange(ctx, base, r.query, from, to, r.step)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			if i == 0 || s.eval < best.eval {
				best = s
			}
			answer = a
		}
		answers[r.name] = answer
		eq := ""
		switch r.against {
		case "":
		case "flat":
			eq = compareFlat(answers["memory flatness per hour, robust (raw series, stddev)"], answer)
		default:
			eq = compare(answers[r.against], answer)
		}
		logf("%s: %d samples, %.2f s", r.name, best.samples, best.eval)
		rows = append(rows, row{name: r.name, samples: thousands(best.samples), evalS: best.eval, points: thousands(int64(len(answer))), equal: eq})
	}
	return rows, nil
}

type stats struct {
	samples int64
	eval    float64
}

// queryRange runs a range query with stats=all and returns its statistics and its
// answer keyed by series labels and step number (so reads at two phases compare).
func queryRange(ctx context.Context, base, query string, start, end time.Time, step time.Duration) (stats, map[string]float64, error) {
	unix := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
	v := url.Values{"query": {query}, "start": {unix(start)}, "end": {unix(end)},
		"step": {strconv.FormatInt(int64(step/time.Second), 10)}, "stats": {"all"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/query_range", strings.NewReader(v.Encode()))
	if err != nil {
		return stats{}, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return stats{}, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status, Error string
		Data          struct {
			Result []struct {
				Metric map[string]string
				Values [][2]json.RawMessage
			}
			Stats struct {
				Timings struct {
					EvalTotalTime float64 `json:"evalTotalTime"`
				}
				Samples struct {
					TotalQueryableSamples int64 `json:"totalQueryableSamples"`
				}
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return stats{}, nil, err
	}
	if body.Status != "success" {
		return stats{}, nil, fmt.Errorf("%s", body.Error)
	}
	answer := map[string]float64{}
	for _, s := range body.Data.Result {
		key := labelsKey(s.Metric)
		for _, p := range s.Values {
			var ts float64
			var val string
			if json.Unmarshal(p[0], &ts) != nil || json.Unmarshal(p[1], &val) != nil {
				return stats{}, nil, fmt.Errorf("bad point %s", p)
			}
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return stats{}, nil, err
			}
			answer[fmt.Sprintf("%s@%d", key, int64(math.Round(ts-float64(start.UnixMilli())/1000))/int64(step/time.Second))] = f
		}
	}
	return stats{samples: body.Data.Stats.Samples.TotalQueryableSamples, eval: body.Data.Stats.Timings.EvalTotalTime}, answer, nil
}

func labelsKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, m[k])
	}
	return b.String()
}

// compare says whether two answers have the same points with the same values (to a
// relative 1e-9: sums in another order).
func compare(want, got map[string]float64) string {
	return compareWith(want, got, func(w, g float64) bool {
		return w == g || math.Abs(w-g) <= 1e-9*math.Max(math.Abs(w), math.Abs(g))
	})
}

// compareFlat says whether a standard deviation and a spread (max − min) agree on which
// windows were flat (0), the only use of the flatness read.
func compareFlat(want, got map[string]float64) string {
	return compareWith(want, got, func(w, g float64) bool { return (w == 0) == (g == 0) })
}

func compareWith(want, got map[string]float64, same func(w, g float64) bool) string {
	missing, extra, differ := 0, 0, 0
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case !same(w, g):
			differ++
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	if missing+extra+differ == 0 {
		return "equal"
	}
	return fmt.Sprintf("%d missing, %d extra, %d differ of %d", missing, extra, differ, len(want))
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
