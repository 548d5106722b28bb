package main

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on every
// Linux architecture Go supports (the kernel's ABI, whatever CONFIG_HZ is).
const clockTicks = 100

// procCPU returns the user+system CPU time of a process, seconds, from /proc/PID/stat.
func procCPU(pid int) (float64, error) {
	f, err := framework.ProcStat(pid)
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseFloat(f[11], 64) // field 14
	stime, err2 := strconv.ParseFloat(f[12], 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return (utime + stime) / clockTicks, nil
}

// procMemory returns VmRSS and VmHWM (peak RSS) of a process, bytes.
func procMemory(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = v * 1024
		case "VmHWM:":
			hwm = v * 1024
		}
	}
	return rss, hwm, nil
}

// families is one scrape of a /metrics endpoint.
type families map[string]*dto.MetricFamily

var scrapeClient = &http.Client{Timeout: 10 * time.Second}

// scrape reads and parses a Prometheus text endpoint.
func scrape(url string) (families, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	return fams, nil
}

// labelValues returns the distinct values of label among family name's samples.
func (f families) labelValues(name, label string) []string {
	var out []string
	if fam := f[name]; fam != nil {
		for _, m := range fam.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == label && !slices.Contains(out, lp.GetValue()) {
					out = append(out, lp.GetValue())
				}
			}
		}
	}
	return out
}

// sum adds the values of name's samples whose labels pass keep (nil keeps all):
// counter and gauge values, a histogram's sample sum (suffix "_sum" of name) or count
// ("_count"), a summary's sum or count likewise.
func (f families) sum(name string, keep func(map[string]string) bool) float64 {
	base, part := name, ""
	for _, suf := range []string{"_sum", "_count"} {
		if _, ok := f[name]; !ok && strings.HasSuffix(name, suf) {
			base, part = strings.TrimSuffix(name, suf), suf
		}
	}
	fam := f[base]
	if fam == nil {
		return 0
	}
	total := 0.0
	for _, m := range fam.Metric {
		if keep != nil {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			if !keep(l) {
				continue
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil && part == "_sum":
			total += m.Histogram.GetSampleSum()
		case m.Histogram != nil && part == "_count":
			total += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil && part == "_sum":
			total += m.Summary.GetSampleSum()
		case m.Summary != nil && part == "_count":
			total += float64(m.Summary.GetSampleCount())
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

// snapshot is a recommender's counters at one moment; the difference of two is the
// cost of what happened between them.
type snapshot struct {
	At time.Time
	// Cycles and CycleSeconds: gpufrac_recommender_cycle_duration_seconds count and sum.
	Cycles, CycleSeconds float64
	// Failed: cycles that could not read Prometheus
	// (gpufrac_recommender_cycle_errors_total{stage="prometheus"}, once per such cycle).
	Failed float64
	// CPUSeconds: the process' user+system CPU (/proc/PID/stat).
	CPUSeconds float64
	// Queries: gpufrac_recommender_prometheus_queries_total, every result.
	Queries float64
	// APIWrites: client-go requests other than GET (rest_client_requests_total):
	// status patches, recommendation creates and updates, events.
	APIWrites float64
	// Written: gpufrac_recommender_recommendations_written_total.
	Written float64
	// Tracked: gpufrac_recommender_workloads_tracked.
	Tracked float64
	// CheckpointsWritten, CheckpointsRestored, CheckpointsIgnored:
	// gpufrac_recommender_checkpoints_{written,restored,ignored}_total.
	CheckpointsWritten, CheckpointsRestored, CheckpointsIgnored float64
	// Steps: gpufrac_recommender_cycle_step_duration_seconds_sum by step, seconds: where
	// the cycles' wall time went (the bootstrap's first cycle: the history load in
	// load_metrics, the first writes in update_recommendations).
	Steps map[string]float64
	// RSS and HWM (peak RSS), bytes (/proc/PID/status).
	RSS, HWM float64
	// Go is where the Go runtime says the process' memory is, as scraped with RSS.
	Go goMemory
	// PromBytes: Prometheus' response bytes, every API handler
	// (prometheus_http_response_size_bytes_sum without /metrics), whoever asked.
	PromBytes float64
	// PromCPUSeconds: Prometheus' user+system CPU.
	PromCPUSeconds float64
}

// takeSnapshot reads a recommender's /metrics and /proc and Prometheus' /metrics and
// /proc.
func takeSnapshot(pid int, metricsURL string, promPID int, promURL string) (snapshot, error) {
	s := snapshot{At: time.Now()}
	m, err := scrape(metricsURL)
	if err != nil {
		return s, err
	}
	s.Cycles = m.sum("gpufrac_recommender_cycle_duration_seconds_count", nil)
	s.CycleSeconds = m.sum("gpufrac_recommender_cycle_duration_seconds_sum", nil)
	s.Failed = m.sum("gpufrac_recommender_cycle_errors_total", func(l map[string]string) bool { return l["stage"] == "prometheus" })
	s.Queries = m.sum("gpufrac_recommender_prometheus_queries_total", nil)
	s.APIWrites = m.sum("rest_client_requests_total", func(l map[string]string) bool { return l["method"] != "GET" })
	s.Written = m.sum("gpufrac_recommender_recommendations_written_total", nil)
	s.Tracked = m.sum("gpufrac_recommender_workloads_tracked", nil)
	s.CheckpointsWritten = m.sum("gpufrac_recommender_checkpoints_written_total", nil)
	s.CheckpointsRestored = m.sum("gpufrac_recommender_checkpoints_restored_total", nil)
	s.CheckpointsIgnored = m.sum("gpufrac_recommender_checkpoints_ignored_total", nil)
	s.Go = goMemory{HeapInuse: m.sum("go_memstats_heap_inuse_bytes", nil), HeapIdle: m.sum("go_memstats_heap_idle_bytes", nil),
		HeapReleased: m.sum("go_memstats_heap_released_bytes", nil), NextGC: m.sum("go_memstats_next_gc_bytes", nil), Sys: m.sum("go_memstats_sys_bytes", nil)}
	s.Steps = map[string]float64{}
	for _, step := range m.labelValues("gpufrac_recommender_cycle_step_duration_seconds", "step") {
		s.Steps[step] = m.sum("gpufrac_recommender_cycle_step_duration_seconds_sum", func(l map[string]string) bool { return l["step"] == step })
	}
	if s.CPUSeconds, err = procCPU(pid); err != nil {
		return s, err
	}
	if s.RSS, s.HWM, err = procMemory(pid); err != nil {
		return s, err
	}
	p, err := scrape(promURL + "/metrics")
	if err != nil {
		return s, err
	}
	s.PromBytes = p.sum("prometheus_http_response_size_bytes_sum", func(l map[string]string) bool { return l["handler"] != "/metrics" })
	s.PromCPUSeconds, err = procCPU(promPID)
	return s, err
}

// goMemory is the Go runtime's account of a process' memory, bytes (client_golang's Go
// collector: runtime.MemStats): the heap's spans in use, its idle spans and those of them
// returned to the OS, the heap size at which the next collection ends (the GC's goal,
// about twice what the last one found live at GOGC=100), and all the runtime holds.
// RSS is about Sys minus HeapReleased.
type goMemory struct{ HeapInuse, HeapIdle, HeapReleased, NextGC, Sys float64 }

// String says the heap in use, idle spans not yet returned to the OS, the GC's goal and
// the runtime's total.
func (g goMemory) String() string {
	return fmt.Sprintf("heap in use %s, idle not returned %s, next GC at %s, runtime total %s",
		mib(g.HeapInuse), mib(g.HeapIdle-g.HeapReleased), mib(g.NextGC), mib(g.Sys))
}

// stepsText says the steps' seconds, the longest first, those of at least 0.1 s.
func (s snapshot) stepsText() string {
	steps := slices.SortedFunc(maps.Keys(s.Steps), func(a, b string) int { return cmp.Compare(s.Steps[b], s.Steps[a]) })
	var parts []string
	for _, step := range steps {
		if v := s.Steps[step]; v >= 0.1 {
			parts = append(parts, fmt.Sprintf("%s %.1f s", step, v))
		}
	}
	return strings.Join(parts, ", ")
}

// delta is b − a for the counters; RSS and HWM are b's.
func delta(a, b snapshot) snapshot {
	steps := map[string]float64{}
	for k, v := range b.Steps {
		steps[k] = v - a.Steps[k]
	}
	return snapshot{Steps: steps,
		At: b.At, Cycles: b.Cycles - a.Cycles, CycleSeconds: b.CycleSeconds - a.CycleSeconds, Failed: b.Failed - a.Failed,
		CPUSeconds: b.CPUSeconds - a.CPUSeconds, Queries: b.Queries - a.Queries,
		APIWrites: b.APIWrites - a.APIWrites, Written: b.Written - a.Written, Tracked: b.Tracked,
		CheckpointsWritten: b.CheckpointsWritten - a.CheckpointsWritten, CheckpointsRestored: b.CheckpointsRestored - a.CheckpointsRestored,
		CheckpointsIgnored: b.CheckpointsIgnored - a.CheckpointsIgnored,
		RSS:                b.RSS, HWM: b.HWM, PromBytes: b.PromBytes - a.PromBytes, PromCPUSeconds: b.PromCPUSeconds - a.PromCPUSeconds,
	}
}
