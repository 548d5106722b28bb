package metrics

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Reading a history load's hourly memory from the gpufrac-history recordings
// (HistoryRules) instead of the exporters' raw series (docs/recommender.md,
// "Pre-aggregated history"). A rule group is evaluated at a fixed phase o within each
// minute, so the hour ending at H is recorded at H + o over (H − 1h + o, H + o]: the
// reads below step at H + o (RecordingPhase learns o), and the caller restamps their
// samples at H. Each returns the labels and units of the raw read it stands for, so
// Reader.decode, the Allocation check and shared-device marking apply unchanged.

// RecordingsUnusable returns why the recordings cannot stand for the selector's raw
// reads, or "" when they can: the rules read the DefaultLabels and their exported_*
// copies (not Direct), over every namespace, with no extra matchers.
func RecordingsUnusable(sel Selector) string {
	switch {
	case sel.Labels != DefaultLabels:
		return fmt.Sprintf("the workload labels are %s/%s/%s, the recordings' %s/%s/%s", sel.Labels.Namespace, sel.Labels.Pod, sel.Labels.Container,
			DefaultLabels.Namespace, DefaultLabels.Pod, DefaultLabels.Container)
	case sel.Direct:
		return "--label-mode is direct; the recordings read the exported_* labels too"
	case sel.Matchers != "":
		return "the read has its own matchers"
	}
	return ""
}

// recorded renders the recorded series name of the source, in the selector's
// namespaces, at exactly each evaluation time: last_over_time over 1 s never reaches
// another hour's (or another phase's) recording, so an hour not recorded has no value.
func recorded(name string, src Source, sel Selector) string {
	return fmt.Sprintf(`last_over_time(%s{%s=%q,%s=~%q}[1s])`, name, HistorySourceLabel, src.Name(), sel.Labels.Namespace, NamespaceRegex(sel.Namespaces))
}

// RecordedPeakQuery returns PromQL whose result, evaluated at a recording time H + o, is
// per (namespace, pod, container, device) and SourceLabel the peak GPU memory in bytes
// of the hour (H − 1h + o, H + o] as HistoryMemoryMax1h recorded it for the source: the
// labels and value of src.MemoryPeakQuery(sel, HistoryPeakInterval) at the same time.
// Nothing where the hour was not recorded.
func RecordedPeakQuery(src Source, sel Selector) string {
	return fmt.Sprintf("max without (%s) (%s)", HistorySourceLabel, recorded(HistoryMemoryMax1h, src, sel))
}

// RecordedFlatQuery returns PromQL whose result, evaluated at a recording time, is per
// (namespace, pod, container, device) the spread (bytes) of the hour's memory:
// HistoryMemoryMax1h − HistoryMemoryMin1h, 0 exactly where the hour was flat, the one use
// of FlatQuery's standard deviation (whose labels it has).
func RecordedFlatQuery(src Source, sel Selector) string {
	return fmt.Sprintf("max without (%s, %s) (%s - %s)", HistorySourceLabel, SourceLabel,
		recorded(HistoryMemoryMax1h, src, sel), recorded(HistoryMemoryMin1h, src, sel))
}

// RecordingPhase returns the phase of the source's recordings (how far past each whole
// HistoryRuleInterval the rule group evaluates), learnt from the timestamp of its latest
// minute recording within Prometheus' lookback before at; false when there is none (the
// rules are not loaded, or do not record this source). Query errors are returned.
func (r *Reader) RecordingPhase(ctx context.Context, src Source, at time.Time) (time.Duration, bool, error) {
	vec, err := r.Vector(ctx, fmt.Sprintf(`max(timestamp(%s{%s=%q}))`, HistoryMemoryMax1m, HistorySourceLabel, src.Name()), at)
	if err != nil || len(vec) == 0 {
		return 0, false, err
	}
	v := float64(vec[0].Value)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false, nil
	}
	ms := int64(math.Round(v * 1000))
	every := HistoryRuleInterval.Milliseconds()
	return time.Duration((ms%every+every)%every) * time.Millisecond, true, nil
}

// RecordedHours returns the recording times in [from, to] (Unix milliseconds), stepping
// by HistoryPeakInterval (from and to at the recordings' phase), whose hour the source's
// recordings hold whole: HistoryMinutes1h reached HistoryMinutesPerHour. An hour absent
// from the answer (not recorded, or made of fewer minutes) must be read from the raw
// series. Query errors are returned.
func (r *Reader) RecordedHours(ctx context.Context, src Source, from, to time.Time) (map[int64]bool, error) {
	q := fmt.Sprintf(`last_over_time(%s{%s=%q}[1s]) >= %d`, HistoryMinutes1h, HistorySourceLabel, src.Name(), HistoryMinutesPerHour)
	m, err := r.rangeMatrix(ctx, q, from, to, HistoryPeakInterval)
	if err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for _, s := range m {
		for _, p := range s.Values {
			out[int64(p.Timestamp)] = true
		}
	}
	return out, nil
}
