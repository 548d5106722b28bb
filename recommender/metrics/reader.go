package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/recommender/mig"
)

// Signal is a quantity gpufrac reads, with the range of values that can be true.
type Signal string

const (
	// SignalMemory is GPU memory used, bytes, valid in [0, MaxMemoryBytes].
	SignalMemory Signal = "memory"
	// SignalCompute is GPU activity, ratio, valid in [0, 1].
	SignalCompute Signal = "compute"
)

// MaxMemoryBytes is the largest GPU memory sample believed: 4 TiB, above any single GPU
// sold today (H200: 141 GB, B300: 288 GB); anything larger is a DCGM blank sentinel
// (e.g. 9223372036854775794) or a decoding error.
const MaxMemoryBytes = 4 << 40

// MaxPointsPerSeries is Prometheus' limit on points per series in one range query
// ("exceeded maximum resolution of 11,000 points per timeseries").
const MaxPointsPerSeries = 11000

// Drop reasons, the values of the reason label of gpufrac_recommender_samples_dropped_total.
const (
	DropNaN        = "nan"
	DropInf        = "inf"
	DropNegative   = "negative"
	DropOutOfRange = "out_of_range"
	DropNoLabels   = "missing_labels"
	// DropNoContainer: pod-level usage (no container label, KAI) of a pod with several
	// GPU containers or none, which cannot be attributed to one container.
	DropNoContainer = "ambiguous_container"
	// DropMIGUnsupported: DCGM_FI_DEV_GPU_UTIL on a MIG instance, where it is not
	// supported and reads 0.
	DropMIGUnsupported = "mig_unsupported"
	// DropOutsidePodLife: a sample of a live pod from before it was created, after it or
	// its container ended, or a crash-loop zero (workload.SampleInLife).
	DropOutsidePodLife = "outside_pod_life"
	// DropWrongDevice: a sample of a series that names a GPU the pod was not on, as
	// gpufrac's agent or the sharing backend's annotation saw it (Allocation).
	DropWrongDevice = "wrong_device"
	// DropStale: a memory sample of a series that stayed flat while the container's
	// activity read 0 over its window: a value left behind by an exited process (HAMi's
	// hami_vgpu_memory_used_bytes), neither a live peak nor a lower bound.
	DropStale = "stale"
)

// ClampMIGOvershoot is the reason of gpufrac_recommender_samples_clamped_total for a MIG
// instance's activity ratio above 1 (up to mig.MaxOvershoot) read as 1, a saturated
// instance (Field.InstanceRelative).
const ClampMIGOvershoot = "mig_overshoot"

// SamplesClamped counts samples that were read from Prometheus out of range but kept at
// the range's end, because the exporter is known to overshoot there (ClampMIGOvershoot).
var SamplesClamped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gpufrac_recommender_samples_clamped_total",
	Help: "Samples read from Prometheus above their range and kept at its end (a MIG instance's activity above 1 read as 1), by signal and reason.",
}, []string{"signal", "reason"})

// SamplesDroppedName is SamplesDropped's name. Every reason has an alert in
// rules/gpufrac.rules.yaml except outside_pod_life (normal).
const SamplesDroppedName = "gpufrac_recommender_samples_dropped_total"

// SamplesDropped counts samples that were read from Prometheus and thrown away because
// they cannot be true or cannot be attributed; they are never aggregated and never count
// as zero.
var SamplesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: SamplesDroppedName,
	Help: "Samples read from Prometheus and dropped (NaN, Inf, negative, out of range, missing workload labels, ambiguous container, unsupported on MIG, outside the pod's life, stale), by signal and reason.",
}, []string{"signal", "reason"})

// Queries counts PromQL queries sent, by kind (instant, range) and result (ok, error,
// partial: an answer with warnings, see ErrPartialResponse).
var Queries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gpufrac_recommender_prometheus_queries_total",
	Help: "PromQL queries sent to Prometheus by the recommender, by kind and result (ok, error, partial).",
}, []string{"kind", "result"})

// Reasons of gpufrac_recommender_incomplete_data_total: data the recommender did not
// decide from.
const (
	// IncompletePartialResponse: one query answer carried warnings (Thanos, Mimir or
	// Cortex with a store down); counted per answer.
	IncompletePartialResponse = "partial_response"
	// IncompleteNoSamplesWhileRunning: an autoscaler with running pods got no GPU sample
	// in a cycle; counted per autoscaler and cycle.
	IncompleteNoSamplesWhileRunning = "no_samples_while_running"
	// IncompleteAllFiltered: every sample of one signal of one autoscaler's pods was
	// dropped as impossible in a load (e.g. a unit misread); counted per autoscaler,
	// signal and cycle.
	IncompleteAllFiltered = "all_samples_filtered"
	// IncompleteExporterDown: a scrape target that served the series of a running pod
	// of an autoscaler is down (up == 0); counted per autoscaler and cycle.
	IncompleteExporterDown = "exporter_down"
	// IncompleteCountFailed: a diagnostic query failed (the counts of impossible and
	// unlabelled samples, the pods on down scrape targets, e.g. a timeout over 10,000
	// pods); the data queries, which filter those samples inside PromQL, succeeded, so
	// the cycle went on without the count. Counted per failed query.
	IncompleteCountFailed = "count_failed"
)

// Incomplete counts data the recommender refused to decide from, by reason (the
// Incomplete* constants). Each occurrence also sets a condition on the autoscalers it
// affects.
var Incomplete = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gpufrac_recommender_incomplete_data_total",
	Help: "Prometheus data the recommender did not decide from, by reason (partial_response and count_failed per query; no_samples_while_running, all_samples_filtered and exporter_down per autoscaler and cycle).",
}, []string{"reason"})

// ErrPartialResponse is matched (errors.Is) by the error a query returns when
// Prometheus answered "success" with warnings: the answer may omit series (Thanos,
// Mimir and Cortex do this when a store is down), so it is never decided from.
var ErrPartialResponse = errors.New("partial response")

// PartialResponseError is a successful answer that carried warnings.
type PartialResponseError struct {
	// Query is the PromQL sent.
	Query string
	// Warnings are the answer's warnings, as sent.
	Warnings []string
}

// Error names the query and its first warnings.
func (e *PartialResponseError) Error() string {
	w := e.Warnings
	if len(w) > 3 {
		w = w[:3]
	}
	return fmt.Sprintf("prometheus answered %q with %d warnings (incomplete answer, not used): %s", e.Query, len(e.Warnings), strings.Join(w, "; "))
}

// Is makes errors.Is(err, ErrPartialResponse) true.
func (e *PartialResponseError) Is(target error) bool { return target == ErrPartialResponse }

// partial counts an answer with warnings and returns its error, or nil without warnings.
func partial(kind, query string, warnings promv1.Warnings) error {
	if len(warnings) == 0 {
		return nil
	}
	Queries.WithLabelValues(kind, "partial").Inc()
	Incomplete.WithLabelValues(IncompletePartialResponse).Inc()
	return &PartialResponseError{Query: query, Warnings: warnings}
}

// Reader runs PromQL through the client_golang API client and decodes per-container series.
type Reader struct {
	API    promv1.API
	Labels Labels
	// Device are the labels identifying a GPU or MIG instance (Source.DeviceLabels).
	Device []string
	// Timeout bounds each query; 0 means 30s.
	Timeout time.Duration
	// MaxSamplesPerQuery bounds the samples (series × points) one range query may ask
	// for, for backends that refuse larger answers: Prometheus' --query.max-samples
	// (default 50,000,000 loaded at once), Thanos' and Cortex's limits, Mimir's
	// -querier.max-fetched-samples-per-query. 0 means no bound beyond
	// MaxPointsPerSeries. Chunks are sized from the series count of the previous chunk;
	// a chunk that a backend still refuses as too large is halved and retried.
	MaxSamplesPerQuery int
	// Allocation, when set, is checked by every decoded query: a series that names a GPU
	// its pod was not on is dropped (DropWrongDevice) and named in Series.WrongDevice.
	Allocation Allocation
}

func (r *Reader) timeout() time.Duration {
	if r.Timeout <= 0 {
		return 30 * time.Second
	}
	return r.Timeout
}

// Vector runs an instant query at ts and returns its raw vector. It returns an error when
// Prometheus fails, when the answer carries warnings (a *PartialResponseError matching
// ErrPartialResponse: the answer may be incomplete, so no vector is returned), or when
// the result is not a vector or scalar (a scalar becomes a one-element vector without
// labels). Infos (PromQL annotations that do not affect the result) are logged at -v=2.
func (r *Reader) Vector(ctx context.Context, query string, ts time.Time) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	began := time.Now()
	v, warnings, infos, err := r.API.Query(ctx, query, ts)
	klog.FromContext(ctx).V(4).Info("Prometheus query", "kind", "instant", "query", query, "took", time.Since(began), "err", err)
	if err != nil {
		Queries.WithLabelValues("instant", "error").Inc()
		return nil, fmt.Errorf("prometheus query %q: %w", query, err)
	}
	if err := partial("instant", query, warnings); err != nil {
		return nil, err
	}
	Queries.WithLabelValues("instant", "ok").Inc()
	if len(infos) > 0 {
		klog.FromContext(ctx).V(2).Info("Prometheus infos", "query", query, "infos", infos)
	}
	switch val := v.(type) {
	case model.Vector:
		return val, nil
	case *model.Scalar:
		return model.Vector{{Metric: model.Metric{}, Value: val.Value, Timestamp: val.Timestamp}}, nil
	}
	return nil, fmt.Errorf("prometheus query %q: want a vector, got %s", query, typeOf(v))
}

// Instant runs an instant query at ts and returns one series per container, each with one
// sample, after dropping impossible values of the signal.
func (r *Reader) Instant(ctx context.Context, signal Signal, query string, ts time.Time) ([]Series, error) {
	vec, err := r.Vector(ctx, query, ts)
	if err != nil {
		return nil, err
	}
	return r.decode(signal, toMatrix(vec), nil), nil
}

// Range runs query over [start, end] at step, split into chunks of at most
// MaxPointsPerSeries points, and returns one series per container. It returns the first
// chunk's error, and a *PartialResponseError (ErrPartialResponse) when any chunk's
// answer carried warnings; a failed history load is retried by the caller, never read as
// zero and never read in part.
func (r *Reader) Range(ctx context.Context, signal Signal, query string, start, end time.Time, step time.Duration) ([]Series, error) {
	m, err := r.rangeMatrix(ctx, query, start, end, step)
	if err != nil {
		return nil, err
	}
	return r.decode(signal, m, nil), nil
}

// RangeShared is Range with shared-device detection across every namespace: copies is
// CopiesQuery's PromQL for the same signal and window (or "" for none), run over the same
// steps; a value that it says several pods reported on one device at one time is a copied
// device value (Series.SharedSamples), even where the other pods are in namespaces the
// data query does not read.
func (r *Reader) RangeShared(ctx context.Context, signal Signal, query, copies string, start, end time.Time, step time.Duration) ([]Series, error) {
	m, err := r.rangeMatrix(ctx, query, start, end, step)
	if err != nil {
		return nil, err
	}
	var c model.Matrix
	if copies != "" {
		if c, err = r.rangeMatrix(ctx, copies, start, end, step); err != nil {
			return nil, err
		}
	}
	return r.decode(signal, m, r.copiesOf(c)), nil
}

// InstantShared is Instant with shared-device detection across every namespace (see
// RangeShared).
func (r *Reader) InstantShared(ctx context.Context, signal Signal, query, copies string, ts time.Time) ([]Series, error) {
	vec, err := r.Vector(ctx, query, ts)
	if err != nil {
		return nil, err
	}
	var c model.Vector
	if copies != "" {
		if c, err = r.Vector(ctx, copies, ts); err != nil {
			return nil, err
		}
	}
	return r.decode(signal, toMatrix(vec), r.copiesOf(toMatrix(c))), nil
}

func toMatrix(vec model.Vector) model.Matrix {
	m := make(model.Matrix, 0, len(vec))
	for _, s := range vec {
		m = append(m, &model.SampleStream{Metric: s.Metric, Values: []model.SamplePair{{Timestamp: s.Timestamp, Value: s.Value}}})
	}
	return m
}

// copyKey is one value of one source field.
type copyKey struct {
	source string
	v      float64
}

// deviceCopies[device][t][(source, value)] is how many pods, in any namespace, reported
// that value of that field on that device at t (only counts of 2 or more).
type deviceCopies map[string]map[model.Time]map[copyKey]int

// copiesOf decodes CopiesQuery's answer.
func (r *Reader) copiesOf(m model.Matrix) deviceCopies {
	out := deviceCopies{}
	for _, s := range m {
		dev := r.deviceKey(s.Metric)
		v, err := strconv.ParseFloat(string(s.Metric[CopyValueLabel]), 64)
		if dev == "" || err != nil {
			continue
		}
		k := copyKey{source: string(s.Metric[SourceLabel]), v: v}
		for _, p := range s.Values {
			if p.Value < 2 {
				continue
			}
			if out[dev] == nil {
				out[dev] = map[model.Time]map[copyKey]int{}
			}
			if out[dev][p.Timestamp] == nil {
				out[dev][p.Timestamp] = map[copyKey]int{}
			}
			out[dev][p.Timestamp][k] = max(out[dev][p.Timestamp][k], int(p.Value))
		}
	}
	return out
}

// rangeMatrix runs a range query in chunks of at most MaxPointsPerSeries points, and
// with MaxSamplesPerQuery of at most that many samples (chunkPoints). A chunk refused
// as too large (TooManySamples) or timed out (timedOut) is halved and retried down to
// one step; any other error, or a chunk of one step still failing, fails the query.
func (r *Reader) rangeMatrix(ctx context.Context, query string, start, end time.Time, step time.Duration) (model.Matrix, error) {
	if step <= 0 {
		return nil, fmt.Errorf("range query step must be positive, got %s", step)
	}
	var all model.Matrix
	points := r.chunkPoints(r.seriesAt(ctx, query, end))
	ceiling := points // lowered by each chunk a backend refuses as too large
	for from := start; !from.After(end); {
		to := from.Add(step * time.Duration(points-1))
		if to.After(end) {
			to = end
		}
		// The points this chunk asks for: fewer than points when the range ends first.
		asked := int(to.Sub(from)/step) + 1
		cctx, cancel := context.WithTimeout(ctx, r.timeout())
		began := time.Now()
		v, warnings, _, err := r.API.QueryRange(cctx, query, promv1.Range{Start: from, End: to, Step: step})
		cancel()
		klog.FromContext(ctx).V(4).Info("Prometheus query", "kind", "range", "query", query, "start", from, "end", to, "step", step, "took", time.Since(began), "err", err)
		if err != nil && asked > 1 && ctx.Err() == nil && (TooManySamples(err) || timedOut(err)) {
			result := "too_many_samples"
			if timedOut(err) {
				result = "timeout"
			}
			Queries.WithLabelValues("range", result).Inc()
			// The backend's limit or our timeout is below this chunk: retry one half its
			// size. Halving points instead would resend the same range while points is
			// still above what the range holds (11,000 against 120 for 2 hours at 1m:
			// seven identical timeouts).
			points = asked / 2
			ceiling = points
			continue
		}
		if err != nil {
			Queries.WithLabelValues("range", "error").Inc()
			return nil, fmt.Errorf("prometheus range query %q [%s, %s]: %w", query, from.Format(time.RFC3339), to.Format(time.RFC3339), err)
		}
		if err := partial("range", query, warnings); err != nil {
			return nil, err
		}
		Queries.WithLabelValues("range", "ok").Inc()
		m, ok := v.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("prometheus range query %q: want a matrix, got %s", query, typeOf(v))
		}
		all = append(all, m...)
		points = min(ceiling, r.chunkPoints(len(m)))
		from = to.Add(step)
	}
	return all, nil
}

// seriesAt estimates the series a range query returns, for sizing its first chunk under
// MaxSamplesPerQuery: count(query) at ts, or 1 when no bound is set or the count fails
// (a chunk still too large is then halved).
func (r *Reader) seriesAt(ctx context.Context, query string, ts time.Time) int {
	if r.MaxSamplesPerQuery <= 0 {
		return 1
	}
	vec, err := r.Vector(ctx, "count("+query+")", ts)
	if err != nil || len(vec) == 0 {
		return 1
	}
	return max(1, int(vec[0].Value))
}

// chunkPoints is the most points per series one range query asks for when the answer
// has series series: MaxPointsPerSeries, or fewer so that series × points stays within
// MaxSamplesPerQuery (at least one point).
func (r *Reader) chunkPoints(series int) int {
	if r.MaxSamplesPerQuery <= 0 {
		return MaxPointsPerSeries
	}
	return max(1, min(MaxPointsPerSeries, r.MaxSamplesPerQuery/max(series, 1)))
}

// timedOut reports whether one chunk's query ran out of time: the per-query Timeout
// (context.DeadlineExceeded) or Prometheus' own --query.timeout (errorType "timeout").
// A history bootstrap over days of a heavy query (the cross-namespace shared-device
// copies) can exceed it on a loaded Prometheus; smaller chunks then get through.
func timedOut(err error) bool {
	var pe *promv1.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &pe) && pe.Type == promv1.ErrTimeout)
}

// TooManySamples reports whether err is a backend refusing a query as too large:
// Prometheus' and Thanos' "query processing would load too many samples into memory",
// Cortex's and Mimir's limits on samples fetched per query.
func TooManySamples(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"too many samples", "maximum number of samples", "max-fetched-samples-per-query", "max_fetched_samples_per_query"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// decode groups streams by container and device, drops impossible values (counting
// them), converts a MIG instance's activity to a share of the whole GPU (gpuShare),
// marks device-wide values copied to several pods of a shared GPU, and merges the
// devices and duplicate series of one container with max, never a sum.
func (r *Reader) decode(signal Signal, m model.Matrix, copies deviceCopies) []Series {
	type devSample struct {
		id     ContainerID
		src    string
		v, raw float64 // v: a share of the whole GPU (gpuShare); raw: as read
	}
	type point struct {
		v      float64
		shared bool
	}
	merged := map[ContainerID]map[model.Time]point{}
	// devices[id][t] lists the distinct devices a container reported on at t.
	devices := map[ContainerID]map[model.Time][]string{}
	sources := map[ContainerID]string{}
	profiles := map[ContainerID]string{} // MIG profile of the container's series
	wrong := map[ContainerID]string{}    // why series of the container were not used
	// byDevice[device][t] lists the pods that reported a value on one device at t.
	byDevice := map[string]map[model.Time][]devSample{}
	for _, s := range m {
		id := ContainerID{
			Namespace: string(s.Metric[model.LabelName(r.Labels.Namespace)]),
			Pod:       string(s.Metric[model.LabelName(r.Labels.Pod)]),
			Container: string(s.Metric[model.LabelName(r.Labels.Container)]),
		}
		if id.Namespace == "" || id.Pod == "" {
			SamplesDropped.WithLabelValues(string(signal), DropNoLabels).Add(float64(len(s.Values)))
			continue
		}
		src := string(s.Metric[SourceLabel])
		if al, dev, bad := r.Allocation.contradicts(id, s.Metric); bad {
			SamplesDropped.WithLabelValues(string(signal), DropWrongDevice).Add(float64(len(s.Values)))
			what := src
			if what == "" {
				what = "the " + string(signal) + " series"
			}
			wrong[id] = fmt.Sprintf("%s of pod %s container %s names GPU %s, but %s saw the pod on %s: not used", what, id.Pod, id.Container, dev, al.By, al)
			continue
		}
		own := PerProcess(src) // a per-process measurement is never a copy, equal or not
		onMIG := s.Metric[MIGInstanceLabel] != ""
		if p := string(s.Metric[MIGProfileLabel]); p != "" {
			profiles[id] = p
		}
		share := gpuShare(signal, src, s.Metric)
		dev := r.deviceKey(s.Metric)
		if merged[id] == nil {
			merged[id] = map[model.Time]point{}
		}
		for _, p := range s.Values {
			raw := float64(p.Value)
			v := raw * share
			reason := Invalid(signal, raw)
			if reason == "" && onMIG && src == DCGMGPUUtil {
				reason = DropMIGUnsupported // GPU_UTIL is not supported on MIG: 0 there is not idle
			}
			if reason != "" {
				SamplesDropped.WithLabelValues(string(signal), reason).Inc()
				continue
			}
			if dev != "" {
				if devices[id] == nil {
					devices[id] = map[model.Time][]string{}
				}
				if !slices.Contains(devices[id][p.Timestamp], dev) {
					devices[id][p.Timestamp] = append(devices[id][p.Timestamp], dev)
				}
			}
			if dev != "" && !own {
				if byDevice[dev] == nil {
					byDevice[dev] = map[model.Time][]devSample{}
				}
				byDevice[dev][p.Timestamp] = append(byDevice[dev][p.Timestamp], devSample{id, src, v, raw})
			}
			if src != "" {
				sources[id] = src // a field whose samples were all dropped names no source
			}
			if old, ok := merged[id][p.Timestamp]; !ok || v > old.v {
				merged[id][p.Timestamp] = point{v: v}
			}
		}
	}
	// Copies seen across every namespace (CopiesQuery): a value that n pods, wherever
	// they run, reported on the device at t is the device's, shared by n pods.
	for dev, byTime := range byDevice {
		for t, samples := range byTime {
			for _, d := range samples {
				n := copies[dev][t][copyKey{d.src, d.raw}]
				if n < 2 || d.v == 0 {
					continue
				}
				if p, ok := merged[d.id][t]; ok && p.v == d.v && !p.shared {
					p.shared = true
					if signal == SignalCompute {
						p.v = d.v / float64(n)
					}
					merged[d.id][t] = p
				}
			}
		}
	}
	// A value that several pods report identically on one device at one time is the
	// device's value copied to each sharing pod (dcgm-exporter without per-pod
	// attribution): an upper bound shared by them, never a per-pod measurement. Compute
	// (compressible) is split evenly, so the co-tenants' sum is the device's value, not
	// N times it; memory (incompressible: one tenant may hold most of it) stays the
	// upper bound for each.
	for _, byTime := range byDevice {
		for t, samples := range byTime {
			if len(samples) < 2 || samples[0].v == 0 {
				continue
			}
			same := true
			for _, d := range samples[1:] {
				if d.v != samples[0].v || d.id.Pod == samples[0].id.Pod {
					same = false
					break
				}
			}
			if same {
				pods := map[string]bool{}
				for _, d := range samples {
					pods[d.id.Namespace+"/"+d.id.Pod] = true
				}
				for _, d := range samples {
					if p, ok := merged[d.id][t]; ok && p.v == d.v && !p.shared {
						p.shared = true
						if signal == SignalCompute {
							p.v = d.v / float64(len(pods))
						}
						merged[d.id][t] = p
					}
				}
			}
		}
	}
	out := make([]Series, 0, len(merged))
	for id := range wrong {
		if len(merged[id]) == 0 {
			out = append(out, Series{ID: id, WrongDevice: wrong[id]}) // nothing else of it: still said
		}
	}
	for id, byTime := range merged {
		if len(byTime) == 0 {
			continue
		}
		s := Series{ID: id, Source: sources[id], MIGProfile: profiles[id], WrongDevice: wrong[id], Samples: make([]Sample, 0, len(byTime))}
		for _, devs := range devices[id] {
			s.Devices = max(s.Devices, len(devs))
		}
		for t, p := range byTime {
			s.Samples = append(s.Samples, Sample{Time: t.Time(), Value: p.v})
			if p.shared {
				s.SharedSamples++
			}
		}
		sort.Slice(s.Samples, func(i, j int) bool { return s.Samples[i].Time.Before(s.Samples[j].Time) })
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out
}

// PerProcess reports whether the published metric is measured per process (gpufrac's
// agent: NVML per-process memory and SM utilisation), so that equal values of two pods
// on one GPU are two measurements that happen to agree, never a device value copied.
func PerProcess(metric string) bool { return fieldOf(metric).PerProcess }

// InstanceRelative reports whether the published metric is, on a MIG instance, a ratio
// of the instance rather than of the whole GPU (Field.InstanceRelative).
func InstanceRelative(metric string) bool { return fieldOf(metric).InstanceRelative }

// fieldOf returns the field a known source publishes under the metric name, or the zero
// Field.
func fieldOf(metric string) Field {
	if metric == "" {
		return Field{}
	}
	for _, src := range Sources {
		for _, sig := range []Signal{SignalMemory, SignalCompute} {
			for _, f := range src.Fields(sig) {
				if f.Metric == metric {
					return f
				}
			}
		}
	}
	return Field{}
}

// gpuShare is the factor converting a value of the stream to a share of the whole GPU:
// for the compute signal of an instance-relative field on a MIG instance whose profile
// NVIDIA's tables know, the profile's share of the GPU's compute (1/7 for 1g.10gb);
// otherwise 1 (a MIG instance of unknown profile is then read as if it were the whole
// GPU: an upper bound).
func gpuShare(signal Signal, src string, m model.Metric) float64 {
	if signal != SignalCompute || m[MIGInstanceLabel] == "" || !InstanceRelative(src) {
		return 1
	}
	p, err := mig.Parse(string(m[MIGProfileLabel]))
	if err != nil {
		return 1
	}
	if share, ok := p.ComputeShare(); ok {
		return share
	}
	return 1
}

// DeviceUUIDLabels are the spellings of a GPU's UUID label across exporters:
// dcgm-exporter and the agent (UUID), KAI (gpu_uuid), HAMi ≥ 2.9 (device_uuid), HAMi ≤ 2.8
// (deviceuuid). Any of them identifies the device for shared-device detection.
var DeviceUUIDLabels = []string{"UUID", "gpu_uuid", "device_uuid", "deviceuuid"}

// deviceKey identifies the GPU (or MIG instance) a series is on: the reader's device
// labels, or else the first UUID spelling the series carries, with its MIG instance
// (GPU_I_ID); "" when the series names no device.
func (r *Reader) deviceKey(m model.Metric) string {
	uuid := ""
	for _, l := range append(append([]string(nil), r.Device...), DeviceUUIDLabels...) {
		if l == MIGInstanceLabel || l == MIGProfileLabel {
			continue
		}
		if v := m[model.LabelName(l)]; v != "" {
			uuid = string(v)
			break
		}
	}
	if uuid == "" {
		return ""
	}
	return uuid + "\x00" + string(m[MIGInstanceLabel])
}

// PodDrops counts impossible samples per pod (namespace, pod) and drop reason, and the
// samples clamped into range (ClampMIGOvershoot).
type PodDrops map[[2]string]map[string]float64

// Total returns the samples dropped for one pod, all reasons; clamped samples
// (ClampMIGOvershoot) were kept and are not counted.
func (d PodDrops) Total(namespace, pod string) float64 {
	var n float64
	for reason, v := range d[[2]string{namespace, pod}] {
		if reason != ClampMIGOvershoot {
			n += v
		}
	}
	return n
}

// Record adds the counts to SamplesDropped{signal, reason}, and those of clamped samples
// to SamplesClamped{signal, reason}.
func (d PodDrops) Record(signal Signal) {
	for _, byReason := range d {
		for reason, n := range byReason {
			c := SamplesDropped
			if reason == ClampMIGOvershoot {
				c = SamplesClamped
			}
			c.WithLabelValues(string(signal), reason).Add(n)
		}
	}
}

// CountDropped runs sel.DropCountQuery for the fields of one signal over (from, to] and
// returns the counts per pod; Record adds them to the counter. Errors (including partial
// answers) are returned like any query's.
func (r *Reader) CountDropped(ctx context.Context, signal Signal, sel Selector, fields []Field, from, to time.Time) (PodDrops, error) {
	q, at := sel.DropCountQuery(fields, from, to)
	if q == "" {
		return PodDrops{}, nil
	}
	vec, err := r.Vector(ctx, q, at)
	if err != nil {
		return nil, err
	}
	out := PodDrops{}
	for _, s := range vec {
		v := float64(s.Value)
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		reason := string(s.Metric["reason"])
		if reason == "" {
			continue // not a count of the query's making
		}
		k := [2]string{string(s.Metric[model.LabelName(sel.Labels.Namespace)]), string(s.Metric[model.LabelName(sel.Labels.Pod)])}
		if out[k] == nil {
			out[k] = map[string]float64{}
		}
		out[k][reason] += v
	}
	return out, nil
}

// CountMissingLabels runs sel.MissingLabelsQuery for the fields of one signal over
// (from, to] and returns how many samples had no pod label, and the end of the window
// counted (the next count starts there).
func (r *Reader) CountMissingLabels(ctx context.Context, sel Selector, fields []Field, from, to time.Time) (float64, time.Time, error) {
	q, at := sel.MissingLabelsQuery(fields, from, to)
	if q == "" {
		return 0, from, nil
	}
	vec, err := r.Vector(ctx, q, at)
	if err != nil {
		return 0, from, err
	}
	n := 0.0
	for _, s := range vec {
		if v := float64(s.Value); v > 0 && !math.IsInf(v, 0) {
			n += v
		}
	}
	return n, at, nil
}

// typeOf names a result's type; a response without data decodes to nil.
func typeOf(v model.Value) string {
	if v == nil {
		return "no result"
	}
	return v.Type().String()
}

// Invalid returns the drop reason for a value that cannot be true for the signal, or ""
// when the value is plausible.
func Invalid(signal Signal, v float64) string {
	switch {
	case math.IsNaN(v):
		return DropNaN
	case math.IsInf(v, 0):
		return DropInf
	case v < 0:
		return DropNegative
	case signal == SignalMemory && v > MaxMemoryBytes:
		return DropOutOfRange
	case signal == SignalCompute && v > 1:
		return DropOutOfRange
	}
	return ""
}
