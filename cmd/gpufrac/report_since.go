package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// The recommender's per-autoscaler series the before/after report reads (see
// recommender/exporter.go and docs/recommender.md). Raw series, not the recording rules,
// so the report works against a Prometheus that does not load rules/gpufrac.rules.yaml.
const (
	seriesHeld      = "gpufrac_autoscaler_gpus_held"
	seriesAllocated = "gpufrac_autoscaler_gpus_allocated"
	seriesPeak      = "gpufrac_autoscaler_gpu_memory_peak_bytes"
	seriesGPUMemory = "gpufrac_recommender_gpu_memory_bytes"
)

// historyRows is how many rows the before/after table prints (plus the latest).
const historyRows = 12

// historyPoint is the fleet at one instant: GPUs held at one per pod against the
// whole-GPU equivalents gpufrac wrote into the pods, and the pods' recent peak memory
// over the memory of each (nil, JSON null, where the peak or GPU memory series is
// missing: no data is not zero, and JSON has no NaN).
type historyPoint struct {
	Time time.Time `json:"time"`
	// GPUsOnePerPod is one GPU per live pod of the managed workloads: the before.
	GPUsOnePerPod float64 `json:"gpusOnePerPod"`
	// GPUsAllocated is the whole-GPU equivalents the pods are placed by, from what
	// gpufrac wrote into them (gpufrac_autoscaler_gpus_allocated: the memory request
	// where one was written below the limit; a pod it has not written counts 1): the
	// after.
	GPUsAllocated float64 `json:"gpusAllocated"`
	// MemoryUtilisationOnePerPod and MemoryUtilisationAllocated are the pods' recent
	// peak memory over the memory of GPUsOnePerPod and of GPUsAllocated, counting only
	// the autoscalers with a peak (one without has no known use), ratio 0–1;
	// nil without a peak or GPU memory sample at that instant.
	MemoryUtilisationOnePerPod *float64 `json:"memoryUtilisationOnePerPod"`
	MemoryUtilisationAllocated *float64 `json:"memoryUtilisationAllocated"`
}

// beforeAfter is the report's --since part.
type beforeAfter struct {
	Since time.Time     `json:"since"`
	Until time.Time     `json:"until"`
	Step  time.Duration `json:"step"`
	// ApplyingSince is the first instant at which the pods held less than one GPU each
	// (gpufrac started applying), to SavingsResolution, nil when that never happened in
	// the window.
	ApplyingSince *time.Time `json:"applyingSince,omitempty"`
	// ApplyingAtDataStart is true when the pods already held less than one GPU each at
	// the first instant with data (DataFrom): gpufrac started applying then or before,
	// which the window's data cannot say (a retention shorter than --since, a
	// recommender first scraped while applying).
	ApplyingAtDataStart bool `json:"applyingAtDataStart"`
	// DataFrom is the first instant of the window with a gpufrac_autoscaler_gpus_held
	// sample, to SavingsResolution; DataCovered is how much of the window has one, at
	// SavingsResolution. The means and GPU-hours saved count those instants only: an
	// instant without data saves nothing, and a window not covered says so.
	DataFrom    time.Time     `json:"dataFrom"`
	DataCovered time.Duration `json:"dataCovered"`
	// MeanOnePerPod and MeanAllocated are the means of the two GPU counts from
	// ApplyingSince (the whole window when nil); SavedGPUHours integrates their
	// difference over the window, GPU-hours. All three are read at SavingsResolution
	// (beforeAfter.integrate), not from Points.
	MeanOnePerPod float64        `json:"meanGPUsOnePerPod"`
	MeanAllocated float64        `json:"meanGPUsAllocated"`
	SavedGPUHours float64        `json:"savedGPUHours"`
	Points        []historyPoint `json:"points"`
	// Warnings are Prometheus' warnings on the answers read, each once (warnPartial):
	// a partial answer (a store, shard or replica that did not answer) may leave pods
	// out of either GPU count, so every figure above may be incomplete. Absent when
	// none.
	Warnings []string `json:"warnings,omitempty"`
}

// checkPrometheusURL reports a --prometheus-url that --since cannot query: empty, or not
// an http(s) URL with a host.
func checkPrometheusURL(s string) error {
	if s == "" {
		return fmt.Errorf("--since needs --prometheus-url: the before/after history is read from the recommender's series in Prometheus")
	}
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--prometheus-url %q: want an http(s) URL such as http://prometheus.monitoring:9090", s)
	}
	return nil
}

// queryBeforeAfter reads the before/after of the last `since` up to until from the
// Prometheus at promURL, optionally for one namespace. It returns an error when
// Prometheus cannot be reached or answers with an error, when it holds no
// gpufrac_autoscaler_gpus_held sample in the window (the recommender's metrics are not
// scraped, or it did not run then), and when it holds gpus_held but no
// gpufrac_autoscaler_gpus_allocated sample in the window (the series dropped): no data
// is not zero GPUs, nor zero saved. Warnings (a partial answer) are written to warn.
func queryBeforeAfter(ctx context.Context, promURL, namespace string, since time.Duration, until time.Time, warn io.Writer) (*beforeAfter, error) {
	if err := checkPrometheusURL(promURL); err != nil {
		return nil, err
	}
	c, err := api.NewClient(api.Config{Address: promURL})
	if err != nil {
		return nil, fmt.Errorf("--prometheus-url %q: %w", promURL, err)
	}
	step := max((since / (historyRows * 20)).Truncate(time.Second), 15*time.Second)
	r := promv1.Range{Start: until.Add(-since), End: until, Step: step}
	sel := ""
	if namespace != "" {
		sel = fmt.Sprintf("{namespace=%q}", namespace)
	}
	// The utilisation's GPUs are those of the autoscalers with a peak (withPeak): one
	// without (no recommendation yet, no memory samples) has no known use, which must
	// not read as its GPUs held empty.
	withPeak := func(series string) string {
		return "sum(" + series + sel + " and on (namespace, autoscaler) " + seriesPeak + sel + ")"
	}
	queries := []string{
		"sum(" + seriesHeld + sel + ")",
		"sum(" + seriesAllocated + sel + ")",
		"sum(" + seriesPeak + sel + ")",
		"max(" + seriesGPUMemory + ")",
		withPeak(seriesHeld),
		withPeak(seriesAllocated),
	}
	prom := promv1.NewAPI(c)
	var partial []string // warnings of the range answers, for ba.Warnings
	series := make([]map[int64]float64, len(queries))
	for i, q := range queries {
		v, warnings, _, err := prom.QueryRange(ctx, q, r, promv1.WithTimeout(30*time.Second))
		if err != nil {
			return nil, fmt.Errorf("querying Prometheus at %s for %s: %w", promURL, q, err)
		}
		partial = addWarnings(partial, warnPartial(warn, q, warnings))
		series[i] = map[int64]float64{}
		if m, ok := v.(model.Matrix); ok {
			for _, s := range m {
				for _, p := range s.Values {
					series[i][p.Timestamp.Unix()] = float64(p.Value)
				}
			}
		}
	}
	if len(series[0]) == 0 {
		return nil, fmt.Errorf("no %s in Prometheus at %s over the last %s: is it scraping the recommender's metrics endpoint (--metrics-bind-address)?", seriesHeld, promURL, since)
	}
	// The recommender exports both series in every scrape: gpus_held without any
	// gpus_allocated is a series dropped on the way (a keep-list, a series limit), and
	// the after is unknown. Reading it as whole GPUs would report no saving at all.
	if len(series[1]) == 0 {
		return nil, fmt.Errorf("no %s in Prometheus at %s over the last %s, while it holds %s: the GPUs allocated (the after) and the GPUs saved cannot be computed; does a metric_relabel_configs or a series limit drop it?", seriesAllocated, promURL, since, seriesHeld)
	}
	ba := &beforeAfter{Since: r.Start, Until: r.End, Step: r.Step, Points: pointsOf(r, series[0], series[1], series[2], series[3], series[4], series[5]), Warnings: partial}
	if err := ba.integrate(ctx, prom, queries[0], queries[1], min(step, SavingsResolution), warn); err != nil {
		return nil, fmt.Errorf("querying Prometheus at %s: %w", promURL, err)
	}
	return ba, nil
}

// SavingsResolution is the finest resolution at which the report integrates the GPU-hours
// saved and finds when gpufrac started applying (PromQL subqueries evaluated at the
// window's end), whatever the table's step: one minute, the scrape interval of most
// Prometheus setups (a gauge sampled more coarsely than it is scraped would count a
// sample for the whole step around it).
const SavingsResolution = time.Minute

// integrate sets ba's applying-since date, means and GPU-hours saved at resolution res,
// not from the table's points (one per step: a step of 42 minutes for a 7-day window
// would count a saving seen in its last minutes for the whole step), by subqueries over
// the window evaluated at ba.Until:
// the first instant at which the pods held less than one GPU each, the means of held and
// allocated from then on (the whole window when never), and the held-minus-allocated
// difference summed over the window, in GPU-hours. held and allocated are the two sums
// queryBeforeAfter reads; an instant without an allocated sample counts the pods as whole
// GPUs, one without a held sample counts nothing. It returns the first query error;
// warnings are written to warn and added to ba.Warnings.
func (ba *beforeAfter) integrate(ctx context.Context, prom promv1.API, held, allocated string, res time.Duration, warn io.Writer) error {
	alloc := "(" + allocated + " or " + held + ")"
	saving := "(" + held + " - " + alloc + ")"
	sub := func(expr string, d time.Duration) string {
		return fmt.Sprintf("%s[%s:%s]", expr, model.Duration(d), model.Duration(res))
	}
	window := ba.Until.Sub(ba.Since)
	scalar := func(q string) (float64, bool, error) {
		v, warnings, _, err := prom.Query(ctx, q, ba.Until, promv1.WithTimeout(30*time.Second))
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", q, err)
		}
		ba.Warnings = addWarnings(ba.Warnings, warnPartial(warn, q, warnings))
		vec, ok := v.(model.Vector)
		if !ok || len(vec) == 0 {
			return 0, false, nil
		}
		return float64(vec[0].Value), true, nil
	}
	first, applied, err := scalar("min_over_time(" + sub("timestamp("+saving+" > 1e-9)", window) + ")")
	if err != nil {
		return err
	}
	dataFrom, hasData, err := scalar("min_over_time(" + sub("timestamp("+held+")", window) + ")")
	if err != nil {
		return err
	}
	covered, _, err := scalar("count_over_time(" + sub(held, window) + ")")
	if err != nil {
		return err
	}
	ba.DataFrom, ba.DataCovered, ba.ApplyingAtDataStart = ba.Since, 0, false
	if hasData {
		ba.DataFrom = time.Unix(0, int64(dataFrom*1e9)).UTC()
		ba.DataCovered = time.Duration(covered) * res
	}
	saved, _, err := scalar("sum_over_time(" + sub(saving, window) + ")")
	if err != nil {
		return err
	}
	ba.SavedGPUHours = saved * res.Hours()
	ba.ApplyingSince = nil
	from := window
	if applied {
		at := time.Unix(0, int64(first*1e9)).UTC()
		ba.ApplyingSince = &at
		ba.ApplyingAtDataStart = hasData && !at.After(ba.DataFrom)
		// (until − from, until] holds the applying instant: half a resolution step more.
		from = ba.Until.Sub(at) + res/2
	}
	meanHeld, okHeld, err := scalar("avg_over_time(" + sub(held, from) + ")")
	if err != nil {
		return err
	}
	meanAlloc, okAlloc, err := scalar("avg_over_time(" + sub(alloc, from) + ")")
	if err != nil {
		return err
	}
	if okHeld && okAlloc {
		ba.MeanOnePerPod, ba.MeanAllocated = meanHeld, meanAlloc
	}
	return nil
}

// pointsOf turns the six range answers (by Unix second) into the table's points. An
// instant without a held sample is skipped; one without an allocated sample counts the
// pods as whole GPUs. The peak memory utilisation divides the peak by the GPUs of the
// autoscalers that have a peak (heldWithPeak, allocatedWithPeak), not by all of them.
func pointsOf(r promv1.Range, held, allocated, peak, gpuMemory, heldWithPeak, allocatedWithPeak map[int64]float64) []historyPoint {
	var out []historyPoint
	for t := r.Start; !t.After(r.End); t = t.Add(r.Step) {
		h, ok := held[t.Unix()]
		if !ok {
			continue
		}
		a, ok := allocated[t.Unix()]
		if !ok {
			a = h
		}
		p := historyPoint{Time: t.UTC(), GPUsOnePerPod: h, GPUsAllocated: a}
		if pk, ok := peak[t.Unix()]; ok {
			if mem := gpuMemory[t.Unix()]; mem > 0 {
				hp := heldWithPeak[t.Unix()]
				ap, ok := allocatedWithPeak[t.Unix()]
				if !ok {
					ap = hp
				}
				p.MemoryUtilisationOnePerPod = ratio(pk, hp*mem)
				p.MemoryUtilisationAllocated = ratio(pk, ap*mem)
			}
		}
		out = append(out, p)
	}
	return out
}

// warnPartial writes each of Prometheus' warnings on its answer to q to warn, and
// returns them, but for PromQL info annotations sent among them
// (metrics.PromQLInfoPrefix: Prometheus 2.46 to 2.53 and Thanos Query), which say
// nothing of missing data, as the recommender reads them.
func warnPartial(warn io.Writer, q string, warnings promv1.Warnings) []string {
	var out []string
	for _, w := range warnings {
		if strings.HasPrefix(w, metrics.PromQLInfoPrefix) {
			continue
		}
		fmt.Fprintf(warn, "warning: Prometheus answered %s with a warning (the answer may be partial): %s\n", q, w)
		out = append(out, w)
	}
	return out
}

// addWarnings appends to list each of ws it does not hold yet.
func addWarnings(list, ws []string) []string {
	for _, w := range ws {
		if !slices.Contains(list, w) {
			list = append(list, w)
		}
	}
	return list
}

// ratio is a / b, nil when b is not positive.
func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	v := a / b
	return &v
}

// writeBeforeAfter prints about historyRows evenly spaced points and the latest, then the
// summary line.
func writeBeforeAfter(w io.Writer, ba *beforeAfter, markdown bool) error {
	header := []string{"TIME (UTC)", "GPUs AT ONE PER POD", "GPUs ALLOCATED", "SAVED", "PEAK MEMORY / HELD: BEFORE", "AFTER"}
	pct := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", *v*100)
	}
	every := max(1, len(ba.Points)/historyRows)
	var lines [][]string
	for i, p := range ba.Points {
		if i%every != 0 && i != len(ba.Points)-1 {
			continue
		}
		lines = append(lines, []string{p.Time.Format("2006-01-02 15:04"), fmt.Sprintf("%.1f", p.GPUsOnePerPod), fmt.Sprintf("%.1f", p.GPUsAllocated),
			fmt.Sprintf("%.1f", p.GPUsOnePerPod-p.GPUsAllocated), pct(p.MemoryUtilisationOnePerPod), pct(p.MemoryUtilisationAllocated)})
	}
	if err := writeTable(w, header, lines, markdown); err != nil {
		return err
	}
	from := "gpufrac wrote no fraction into these pods in this window: every pod held a whole GPU. Mean over the window"
	switch {
	case ba.ApplyingAtDataStart:
		from = "gpufrac already applying at the first sample, " + ba.ApplyingSince.Format(time.RFC3339) + " (since when is not in the window's data). Mean since then"
	case ba.ApplyingSince != nil:
		from = "gpufrac applying since " + ba.ApplyingSince.Format(time.RFC3339) + ". Mean since then"
	}
	start := ba.Since
	if ba.DataFrom.After(start) {
		start = ba.DataFrom
	}
	if _, err := fmt.Fprintf(w, "\n%s: %.1f GPUs at one per pod → %.1f allocated; %.1f GPU-hours saved from %s to %s.\n",
		from, ba.MeanOnePerPod, ba.MeanAllocated, ba.SavedGPUHours, start.UTC().Format(time.RFC3339), ba.Until.UTC().Format(time.RFC3339)); err != nil {
		return err
	}
	if len(ba.Warnings) > 0 {
		if _, err := fmt.Fprintf(w, "Prometheus answered with warnings (%s): its answers may be partial, leaving pods out of the GPU counts, so these figures may be incomplete and the GPU-hours saved are not known to be the cluster's.\n",
			strings.Join(ba.Warnings, "; ")); err != nil {
			return err
		}
	}
	if gap := ba.Until.Sub(ba.Since) - ba.DataCovered; gap > dataGapShown {
		_, err := fmt.Fprintf(w, "Prometheus holds %s for %s of the %s window (first sample %s): the means and GPU-hours saved count those instants only; the other %s have no data, which is not zero saving (a retention shorter than --since, or the recommender's metrics not scraped then).\n",
			seriesHeld, ba.DataCovered, ba.Until.Sub(ba.Since), ba.DataFrom.Format(time.RFC3339), gap.Round(time.Minute))
		return err
	}
	return nil
}

// dataGapShown is how much of a --since window may lack data before the report says so:
// a few minutes of scrape gaps and the lookback at the window's start are no news.
const dataGapShown = 10 * time.Minute
