package metrics

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
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
	// DropOutsidePodLife: a sample of a live pod from after it or its container ended,
	// or a crash-loop zero (workload.SampleInLife); a sample under any pod's name from
	// after a pod of that name completed and before the next was created
	// (workload.StampAfterCompletion). Samples from before a live pod was created are
	// an earlier pod's of the same name and the workload's: kept.
	DropOutsidePodLife = "outside_pod_life"
	// DropWrongDevice: a sample of a series that names a GPU the pod was not on, as
	// gpufrac's agent or the sharing backend's annotation saw it (Allocation).
	DropWrongDevice = "wrong_device"
	// DropStale: a memory sample of a series that stayed flat while the container's
	// activity read 0 over its window: a value left behind by an exited process (HAMi's
	// hami_vgpu_memory_used_bytes), neither a live peak nor a lower bound.
	DropStale = "stale"
	// DropZeroWhileBusy: a memory sample of 0 bytes while the container's GPU activity
	// was above 0 in its window (ZeroWhileBusy): memory the exporter failed to see, not
	// a container that holds none.
	DropZeroWhileBusy = "zero_while_busy"
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
	// IncompleteHistory: the history loaded for an autoscaler's container starts later
	// than the history its written recommendation was made from (Prometheus no longer
	// holds it); counted per autoscaler and cycle.
	IncompleteHistory = "history_incomplete"
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
	Help: "Prometheus data the recommender did not decide from, by reason (partial_response and count_failed per query; no_samples_while_running, all_samples_filtered, exporter_down and history_incomplete per autoscaler and cycle).",
}, []string{"reason"})

// ErrPartialResponse is matched (errors.Is) by the error a query returns when
// Prometheus answered "success" with warnings: the answer may omit series (Thanos,
// Mimir and Cortex do this when a store is down), so it is never decided from.
var ErrPartialResponse = errors.New("partial response")

// ErrSampleOutsideQuery is matched (errors.Is) by the error a query returns when its
// answer holds a sample stamped more than MaxSampleSkew outside the time the query
// evaluated (before its start or after its end; a range query's one step more). Such an
// answer comes from no conforming backend: a proxy or clock that rewrote timestamps, or
// a vector sample without its value (decoded at time 0 as 0). A sample from the future
// would hide every later sample of its container from the history (history.Model.Add
// skips samples not newer than the last one seen), and a zero is no data, so the whole
// answer is refused like a malformed one: the cycle keeps the last recommendations.
var ErrSampleOutsideQuery = errors.New("sample stamped outside the query's time")

// MaxSampleSkew is how far outside the evaluated time a sample may be stamped before its
// answer is refused (ErrSampleOutsideQuery): Prometheus' default lookback delta, 5
// minutes. Prometheus and Thanos stamp samples at the evaluation times exactly;
// VictoriaMetrics and Mimir may shift a range query's start and end to its step (allowed
// besides), and VictoriaMetrics evaluates queries near now up to its
// -search.latencyOffset (30 s) earlier.
const MaxSampleSkew = 5 * time.Minute

// outsideQuery returns an ErrSampleOutsideQuery error for the first sample of m stamped
// more than MaxSampleSkew plus step before start or after end, or nil. A zero start
// (an instant query at the backend's now) checks nothing.
func outsideQuery(kind, query string, m model.Matrix, start, end time.Time, step time.Duration) error {
	if start.IsZero() {
		return nil
	}
	lo, hi := model.TimeFromUnixNano(start.Add(-MaxSampleSkew-step).UnixNano()), model.TimeFromUnixNano(end.Add(MaxSampleSkew+step).UnixNano())
	for _, s := range m {
		for _, p := range s.Values {
			if p.Timestamp < lo || p.Timestamp > hi {
				Queries.WithLabelValues(kind, "error").Inc()
				return fmt.Errorf("prometheus %s query %q: series %s has a sample stamped %s, outside the evaluated time [%s, %s] (a proxy or clock that rewrote timestamps, or a sample without a value); answer refused: %w",
					kind, query, s.Metric, p.Timestamp.Time().UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), ErrSampleOutsideQuery)
			}
		}
	}
	return nil
}

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

// PromQLInfoPrefix begins a PromQL info annotation: a note on the query that may be a
// false positive (a rate over a counter not named *_total, a histogram_quantile whose
// buckets needed a monotonicity fix), not a sign of missing data. Prometheus 2.54 and
// later send them as infos; Prometheus 2.46 to 2.53 and Thanos Query among the warnings.
const PromQLInfoPrefix = "PromQL info: "

// partial counts an answer with warnings and returns its error, or nil without
// warnings. PromQL info annotations sent as warnings (PromQLInfoPrefix) are infos: they
// alone leave the answer complete.
func partial(kind, query string, warnings promv1.Warnings) error {
	var w []string
	for _, s := range warnings {
		if !strings.HasPrefix(s, PromQLInfoPrefix) {
			w = append(w, s)
		}
	}
	if len(w) == 0 {
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
// labels). Infos (PromQL annotations that do not affect the result, among the warnings
// too: PromQLInfoPrefix) are logged at -v=2.
func (r *Reader) Vector(ctx context.Context, query string, ts time.Time) (model.Vector, error) {
	v, err := r.instant(ctx, query, ts)
	if err != nil {
		return nil, err
	}
	var vec model.Vector
	switch val := v.(type) {
	case model.Vector:
		vec = val
	case *model.Scalar:
		vec = model.Vector{{Metric: model.Metric{}, Value: val.Value, Timestamp: val.Timestamp}}
	default:
		Queries.WithLabelValues("instant", "error").Inc()
		return nil, fmt.Errorf("prometheus query %q: want a vector, got %s", query, typeOf(v))
	}
	if err := outsideQuery("instant", query, toMatrix(vec), ts, ts, 0); err != nil {
		return nil, err
	}
	Queries.WithLabelValues("instant", "ok").Inc()
	return vec, nil
}

// instant runs an instant query at ts within the Timeout and returns its value. It
// returns Prometheus' error, or a *PartialResponseError when the answer carried
// warnings; infos are logged at -v=2. The caller counts the query's success.
func (r *Reader) instant(ctx context.Context, query string, ts time.Time) (model.Value, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	began := time.Now()
	v, warnings, infos, err := r.API.Query(ctx, query, ts)
	klog.FromContext(ctx).V(4).Info("Prometheus query", "kind", "instant", "query", query, "took", time.Since(began), "err", err)
	if err != nil {
		Queries.WithLabelValues("instant", "error").Inc()
		return nil, fmt.Errorf("prometheus query %q: %w", query, withBody(err))
	}
	if err := partial("instant", query, warnings); err != nil {
		return nil, err
	}
	if len(infos) > 0 || len(warnings) > 0 { // warnings here are PromQL infos (partial)
		klog.FromContext(ctx).V(2).Info("Prometheus infos", "query", query, "infos", append(infos, warnings...))
	}
	return v, nil
}

// Instant runs an instant query at ts and returns one series per container, each with one
// sample, after dropping impossible values of the signal. Its samples are taken as raw
// samples (no window) by the Allocation check; InstantShared takes the window.
func (r *Reader) Instant(ctx context.Context, signal Signal, query string, ts time.Time) ([]Series, error) {
	vec, err := r.Vector(ctx, query, ts)
	if err != nil {
		return nil, err
	}
	return r.decode(signal, toMatrix(vec), nil, 0), nil
}

// Range runs query over [start, end] at step, split into chunks of at most
// MaxPointsPerSeries points, and returns one series per container. It returns the first
// chunk's error, and a *PartialResponseError (ErrPartialResponse) when any chunk's
// answer carried warnings; a failed history load is retried by the caller, never read as
// zero and never read in part. Each sample is taken to aggregate the step before it (a
// range function over a window of the step), as gpufrac's reads do.
func (r *Reader) Range(ctx context.Context, signal Signal, query string, start, end time.Time, step time.Duration) ([]Series, error) {
	m, err := r.rangeMatrix(ctx, query, start, end, step)
	if err != nil {
		return nil, err
	}
	return r.decode(signal, m, nil, step), nil
}

// RangeShared is Range with shared-device detection across every namespace: copies is
// CopiesQuery's PromQL for the same signal and window (or "" for none), run over the same
// steps; a value that it says several pods reported on one device at one time is a copied
// device value (Series.SharedSamples), even where the other pods are in namespaces the
// data query does not read.
//
// The two queries run at once: each is one PromQL evaluation, which Prometheus runs on
// one core, and the copies query costs about what the data query does.
func (r *Reader) RangeShared(ctx context.Context, signal Signal, query, copies string, start, end time.Time, step time.Duration) ([]Series, error) {
	var m, c model.Matrix
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		m, err = r.rangeMatrix(gctx, query, start, end, step)
		return err
	})
	if copies != "" {
		g.Go(func() (err error) {
			c, err = r.rangeMatrix(gctx, copies, start, end, step)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return r.decode(signal, m, r.copiesOf(c), step), nil
}

// InstantShared is Instant with shared-device detection across every namespace (see
// RangeShared), for a query whose sample aggregates the window before ts.
func (r *Reader) InstantShared(ctx context.Context, signal Signal, query, copies string, ts time.Time, window time.Duration) ([]Series, error) {
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
	return r.decode(signal, toMatrix(vec), r.copiesOf(toMatrix(c)), window), nil
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
	// A series' later chunks are appended to its first stream: one stream per series.
	bySeries := map[model.Fingerprint]*model.SampleStream{}
	ceiling := r.chunkPoints(r.seriesAt(ctx, query, end)) // lowered by each chunk a backend refuses as too large
	points := min(ceiling, FirstChunkPoints)
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
			return nil, fmt.Errorf("prometheus range query %q [%s, %s]: %w", query, from.Format(time.RFC3339), to.Format(time.RFC3339), withBody(err))
		}
		if err := partial("range", query, warnings); err != nil {
			return nil, err
		}
		m, ok := v.(model.Matrix)
		if !ok {
			Queries.WithLabelValues("range", "error").Inc()
			return nil, fmt.Errorf("prometheus range query %q: want a matrix, got %s", query, typeOf(v))
		}
		if err := outsideQuery("range", query, m, from, to, step); err != nil {
			return nil, err
		}
		Queries.WithLabelValues("range", "ok").Inc()
		for _, st := range m {
			if first := bySeries[st.Metric.Fingerprint()]; first != nil {
				first.Values = append(first.Values, st.Values...)
				continue
			}
			bySeries[st.Metric.Fingerprint()] = st
			all = append(all, st)
		}
		points = min(ceiling, r.chunkPoints(len(m)), r.paced(asked, time.Since(began)))
		from = to.Add(step)
	}
	return all, nil
}

// FirstChunkPoints is the most points the first chunk of a range query asks for: an hour
// at the 1-minute cycle interval. Later chunks are sized from how long it took (paced),
// so a history load of 10,000 pods or of days starts small instead of with a chunk of
// MaxPointsPerSeries that runs into the timeout; a live cycle's reads (one or two
// points) are not affected.
const FirstChunkPoints = 60

// paced is how many points the next chunk of a range query asks for after a chunk of
// asked points took took: asked scaled so that it takes about half the timeout (at most
// MaxPointsPerSeries, at least one), so a chunk that nearly timed out is followed by a
// smaller one instead of a timeout that wastes the whole timeout and is retried at half
// (a 1-day bootstrap of 1,000 pods on a loaded Prometheus: 150 s of its 356 s of
// queries were chunks that ran into the 30 s timeout).
func (r *Reader) paced(asked int, took time.Duration) int {
	if took <= 0 {
		return MaxPointsPerSeries
	}
	n := float64(asked) * float64(r.timeout()/2) / float64(took)
	return max(1, int(min(n, MaxPointsPerSeries)))
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
// (context.DeadlineExceeded), or the backend's own. Prometheus, Thanos Query and Mimir
// answer a query past their --query.timeout with HTTP 503 and errorType "timeout", which
// client_golang reads as a server error with the type only in the body
// (promv1.Error.Detail); a query-frontend (Cortex's, Thanos') or a proxy in front of the
// backend (an ingress) answers one past its own timeout with 504 Gateway Timeout. A
// history bootstrap over days of a heavy query (the cross-namespace shared-device
// copies) can exceed either on a loaded Prometheus; smaller chunks then get through.
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pe *promv1.Error
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Type == promv1.ErrTimeout || pe.Msg == gatewayTimeout || bodyError(pe.Detail).Type == string(promv1.ErrTimeout)
}

// maxBodyReason is the most bytes of an answer's body withBody adds to an error.
const maxBodyReason = 300

// markup matches an HTML tag of a proxy's error page.
var markup = regexp.MustCompile(`<[^>]*>`)

// withBody returns err naming the reason the answer's body gave where client_golang's
// message leaves it out: an answer with a status other than 400 or 422 (a 503 of
// Prometheus' unavailable or timeout, a query-frontend's 429 "too many outstanding
// requests", a proxy's 502 page) or whose body is not Prometheus' JSON is "server error:
// 503" with the body only in promv1.Error.Detail. The reason is the JSON's errorType and
// error, or the body's text without markup, on one line, at most maxBodyReason bytes.
// err is wrapped (errors.As finds the *promv1.Error); other errors are returned as they are.
func withBody(err error) error {
	var pe *promv1.Error
	if !errors.As(err, &pe) || pe.Detail == "" {
		return err
	}
	reason := strings.Join(strings.Fields(markup.ReplaceAllString(pe.Detail, " ")), " ")
	if b := bodyError(pe.Detail); b.Msg != "" {
		reason = b.Msg
		if b.Type != "" {
			reason = b.Type + ": " + b.Msg
		}
	}
	if len(reason) > maxBodyReason {
		reason = strings.ToValidUTF8(reason[:maxBodyReason], "") + "…"
	}
	if reason == "" || strings.Contains(err.Error(), reason) {
		return err
	}
	return fmt.Errorf("%w (the answer says: %s)", err, reason)
}

// gatewayTimeout is client_golang's message for an HTTP 504 answer (prom.NewAPI's too).
const gatewayTimeout = "server error: 504"

// apiBody is the type and message of a Prometheus API error answer.
type apiBody struct {
	Type string `json:"errorType"`
	Msg  string `json:"error"`
}

// bodyError reads the error type and message of an answer's body that client_golang kept
// as promv1.Error.Detail (an answer with a status other than 400 or 422); zero when the
// body is not Prometheus' JSON (a proxy's page, a query-frontend's plain text).
func bodyError(detail string) apiBody {
	var b apiBody
	if strings.HasPrefix(strings.TrimSpace(detail), "{") {
		_ = json.Unmarshal([]byte(detail), &b)
	}
	return b
}

// TooManySamples reports whether err is a backend refusing a query as too large for one
// of its limits on what a query loads, each of which a shorter time range lowers (a
// chunk half as long selects fewer samples and chunks, and fewer series where pods come
// and go): Prometheus' and Thanos' "query processing would load too many samples into
// memory"; Mimir's limits on fetched samples, series, chunks and chunk bytes, its
// estimated chunks and memory, and its query length; Cortex's query-frontend's and
// store gateways' series, chunks and bytes limits; VictoriaMetrics' samples per query,
// samples per series and unique series. The message is read from the error and, where a
// query-frontend wrote it as plain text or with a status other than 400 or 422, from the
// answer's body (promv1.Error.Detail).
func TooManySamples(err error) bool {
	msg := strings.ToLower(err.Error())
	var pe *promv1.Error
	if errors.As(err, &pe) {
		msg += " " + strings.ToLower(pe.Detail)
	}
	for _, s := range tooLarge {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// tooLarge are the lower-case parts of the backends' messages for a query over one of
// their limits (TooManySamples).
var tooLarge = []string{
	"too many samples",          // Prometheus, Thanos, Cortex: query processing would load too many samples into memory
	"maximum number of samples", // Mimir: the query exceeded the maximum number of samples
	"max-fetched-samples-per-query", "max_fetched_samples_per_query",
	"maximum number of series", "maximum number of chunks", // Mimir: err-mimir-max-series-per-query, err-mimir-max-chunks-per-query
	"err-mimir-max-chunks-bytes-per-query", "err-mimir-max-estimated-", // chunk bytes; estimated chunks and memory
	"time range exceeds the limit",                             // Mimir, Cortex: query length (err-mimir-max-query-length, -max-total-query-length)
	"max number of series limit", "max number of chunks limit", // Cortex: the query hit the max number of … limit
	"aggregated chunks size limit", "aggregated data size limit", // Cortex, Mimir
	"exceeded series limit", "exceeded chunks limit", "exceeded bytes limit", // Thanos and Cortex store gateways
	"-search.maxsamplesperquery", "-search.maxsamplesperseries", "-search.maxuniquetimeseries", // VictoriaMetrics
}

// decode groups streams by container and device (group: window is the span each
// sample aggregates), drops impossible values (counting them), converts a MIG
// instance's activity to a share of the whole GPU (gpuShare), marks device-wide values
// copied to several pods of a shared GPU, and merges the devices and duplicate series
// of one container with max, never a sum.
//
// It holds each stream's valid samples in one slice and groups samples by time only
// where several streams meet (a container's devices or duplicates, a device's pods):
// a history answer of 1,000 pods × 1 day at 1m is 1.4 M samples, and a map entry per
// sample (by container, by device) was most of the recommender's peak memory.
func (r *Reader) decode(signal Signal, m model.Matrix, copies deviceCopies, window time.Duration) []Series {
	g := r.group(signal, m, window)
	merged := make(mergedPoints, len(g.byID))
	devices := make(map[ContainerID]int, len(g.byID))
	multiAt := make(map[ContainerID]model.Time, len(g.byID))
	for id, sts := range g.byID {
		merged[id], devices[id], multiAt[id] = mergeStreams(sts)
	}
	merged.markCopies(signal, g.byDevice, copies)
	merged.markDevices(signal, g.byDevice, true)
	merged.markDevices(signal, g.perProcess, false)
	out := make([]Series, 0, len(merged))
	for id := range g.wrong {
		if len(merged[id]) == 0 {
			out = append(out, Series{ID: id, WrongDevice: g.wrong[id]}) // nothing else of it: still said
		}
	}
	for id, pts := range merged {
		s := Series{ID: id, Source: g.sources[id], MIGProfile: g.profiles[id], WrongDevice: g.wrong[id], Devices: devices[id], Samples: make([]Sample, len(pts))}
		if n := len(pts); n > 0 && pts[n-1].source() != "" {
			s.Source = pts[n-1].source()
		}
		s.Sources = sampleSources(pts)
		if devices[id] > 1 {
			s.MultiDeviceAt = multiAt[id].Time()
		}
		if n := cotenantPoints(pts); n > 0 {
			s.DeviceLoad = make([]DeviceLoad, 0, n)
		}
		for i, p := range pts {
			s.Samples[i] = Sample{Time: p.t.Time(), Value: p.v}
			if p.shared {
				s.SharedSamples++
			}
			if p.cotenant {
				s.DeviceLoad = append(s.DeviceLoad, DeviceLoad{Time: s.Samples[i].Time, Saturated: p.saturated})
			}
		}
		out = append(out, s)
	}
	sortByID(out)
	return out
}

// sampleSources returns the field of each point where they came from several fields,
// nil where all came from one.
func sampleSources(pts []point) []string {
	for _, p := range pts {
		if p.source() != pts[0].source() {
			out := make([]string, len(pts))
			for i, p := range pts {
				out[i] = p.source()
			}
			return out
		}
	}
	return nil
}

// cotenantPoints counts the points taken on a GPU shared with other pods.
func cotenantPoints(pts []point) int {
	n := 0
	for _, p := range pts {
		if p.cotenant {
			n++
		}
	}
	return n
}

// sortByID sorts series by ContainerID.String, building each key once: comparing the
// keys built at each comparison was two string concatenations per comparison, 8 % of a
// steady cycle's CPU profile at 10,000 pods (make bench-scale, docs/benchmarks.md).
func sortByID(out []Series) {
	keys := make([]string, len(out))
	for i := range out {
		keys[i] = out[i].ID.String()
	}
	sort.Sort(seriesByKey{out, keys})
}

// seriesByKey sorts series and their keys together (sort.Interface).
type seriesByKey struct {
	s    []Series
	keys []string
}

func (b seriesByKey) Len() int           { return len(b.s) }
func (b seriesByKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b seriesByKey) Swap(i, j int) {
	b.s[i], b.s[j] = b.s[j], b.s[i]
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
}

// grouped is an answer's streams by container and by device, with what decode reports
// per container beside its samples.
type grouped struct {
	byID     map[ContainerID][]*stream
	byDevice map[string][]*stream // streams that can carry a device value copied to pods
	// perProcess: per-process streams (the agent's) by device, whose values at one
	// time sum to the device's activity (markDevices).
	perProcess map[string][]*stream
	sources    map[ContainerID]string
	profiles   map[ContainerID]string // MIG profile of the container's series
	wrong      map[ContainerID]string // why series of the container were not used
}

// group reads each series of m into a stream of its valid points, grouped by container
// and device; series without pod labels, and samples on a GPU the allocation
// contradicts, are dropped and counted (SamplesDropped). window is the span each sample
// aggregates, ending at its time, which says whether it may hold an earlier pod's usage
// (Allocated.earlier).
func (r *Reader) group(signal Signal, m model.Matrix, window time.Duration) grouped {
	g := grouped{byID: map[ContainerID][]*stream{}, byDevice: map[string][]*stream{}, perProcess: map[string][]*stream{},
		sources: map[ContainerID]string{}, profiles: map[ContainerID]string{}, wrong: map[ContainerID]string{}}
	var pending []pendingStream
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
		st := &stream{id: id, src: src, dev: r.deviceKey(s.Metric)}
		if al, dev, bad := r.Allocation.contradicts(id, s.Metric); bad {
			// Only the samples of the pod the authority speaks of contradict it: those
			// of an earlier pod of the name are the workload's history (earlier).
			var wrong int
			var straddling []devPoint
			for _, p := range validPoints(signal, src, s) {
				switch all, straddles := al.earlier(p.t, window); {
				case all:
					st.pts = append(st.pts, p)
				case straddles:
					straddling = append(straddling, p)
				default:
					wrong++
				}
			}
			if len(straddling) > 0 {
				pending = append(pending, pendingStream{st: &stream{id: id, src: src, dev: st.dev, pts: straddling}, metric: s.Metric, dev: dev, al: al})
			}
			if wrong > 0 {
				SamplesDropped.WithLabelValues(string(signal), DropWrongDevice).Add(float64(wrong))
				g.wrongDevice(signal, id, src, dev, al)
			}
		} else {
			st.pts = validPoints(signal, src, s)
		}
		g.add(st, s.Metric)
	}
	// A sample whose window straddles the creation of the pod the authority speaks of,
	// on a GPU it contradicts, is the earlier pod's last window where the container
	// reports on a GPU the authority lists at that time (a replica replaced onto
	// another GPU); else it is the pod's own series on the wrong GPU.
	for _, ps := range pending {
		var own, wrong []devPoint
		for _, p := range ps.st.pts {
			if slices.ContainsFunc(g.byID[ps.st.id], func(o *stream) bool { return !o.pending && o.at(p.t) }) {
				own = append(own, p)
			} else {
				wrong = append(wrong, p)
			}
		}
		if len(wrong) > 0 {
			SamplesDropped.WithLabelValues(string(signal), DropWrongDevice).Add(float64(len(wrong)))
			g.wrongDevice(signal, ps.st.id, ps.st.src, ps.dev, ps.al)
		}
		ps.st.pts, ps.st.pending = own, true
		g.add(ps.st, ps.metric)
	}
	return g
}

// pendingStream is a stream of samples that straddle the creation of the pod an
// allocation speaks of (group), with its series' labels, the GPU it names and the
// allocation it contradicts.
type pendingStream struct {
	st     *stream
	metric model.Metric
	dev    string
	al     Allocated
}

// wrongDevice says that samples of the container's series of field src were not used:
// they name GPU dev, on which al did not see the pod.
func (g grouped) wrongDevice(signal Signal, id ContainerID, src, dev string, al Allocated) {
	what := src
	if what == "" {
		what = "the " + string(signal) + " series"
	}
	g.wrong[id] = fmt.Sprintf("%s of pod %s container %s names GPU %s, but %s saw the pod on %s: not used", what, id.Pod, id.Container, dev, al.By, al)
}

// add groups the stream of series m by container and device, unless it has no point.
func (g grouped) add(st *stream, m model.Metric) {
	if len(st.pts) == 0 {
		return
	}
	if p := string(m[MIGProfileLabel]); p != "" {
		g.profiles[st.id] = p
	}
	if st.src != "" {
		g.sources[st.id] = st.src // a field whose samples were all dropped names no source
	}
	g.byID[st.id] = append(g.byID[st.id], st)
	// A per-process measurement (the agent's) is never a copy, equal or not.
	switch {
	case st.dev == "":
	case PerProcess(st.src):
		g.perProcess[st.dev] = append(g.perProcess[st.dev], st)
	default:
		g.byDevice[st.dev] = append(g.byDevice[st.dev], st)
	}
}

// at reports whether the stream has a point at t.
func (st *stream) at(t model.Time) bool {
	_, ok := slices.BinarySearchFunc(st.pts, t, func(p devPoint, t model.Time) int { return cmp.Compare(p.t, t) })
	return ok
}

// mergedPoints are each container's points after its streams are merged (mergeStreams).
type mergedPoints map[ContainerID][]point

// share marks p as the device's value v copied to n pods (compute split evenly), unless
// it was marked already or is another value.
func (p *point) share(signal Signal, v float64, n int) {
	if p.v != v || p.shared {
		return
	}
	p.shared = true
	if signal == SignalCompute {
		p.v = v / float64(n)
	}
}

// load marks p, for compute, as taken on a GPU shared with other pods, saturated when
// the GPU's activity was at least SaturatedActivity.
func (p *point) load(signal Signal, saturated bool) {
	if signal == SignalCompute {
		p.cotenant = true
		p.saturated = p.saturated || saturated
	}
}

// podKey is a pod (namespace, name) among a device's tenants at one time.
type podKey struct{ namespace, pod string }

// tenants returns the distinct pods of at, reusing buf.
func tenants(buf []podKey, at []timed) []podKey {
	buf = buf[:0]
	for _, d := range at {
		if k := (podKey{d.st.id.Namespace, d.st.id.Pod}); !slices.Contains(buf, k) {
			buf = append(buf, k)
		}
	}
	return buf
}

// markCopies marks the copies seen across every namespace (CopiesQuery): a value that n
// pods, wherever they run, reported on the device at t is the device's, shared by n pods.
// For compute, any such value (0 too: an idle shared GPU) marks the point as taken on a
// shared GPU (point.load), saturated by the device's value as read (the instance's own
// ratio on MIG).
func (mp mergedPoints) markCopies(signal Signal, byDevice map[string][]*stream, copies deviceCopies) {
	for dev, sts := range byDevice {
		if copies[dev] == nil {
			continue
		}
		for _, st := range sts {
			for _, d := range st.pts {
				if n := copies[dev][d.t][copyKey{st.src, d.raw}]; n >= 2 {
					if p := pointAt(mp[st.id], d.t); p != nil {
						p.load(signal, d.raw >= SaturatedActivity)
						if d.v != 0 {
							p.share(signal, d.v, n)
						}
					}
				}
			}
		}
	}
}

// markDevices marks, at every time at which several pods report on one device, their
// points as taken on a shared GPU (point.load, compute only), saturated by the device's
// activity as read: a value all of them report alike (copies), or else the sum of their
// values (the agent's per-process measurements, or per-pod values that differ). Where
// copies is true (streams that can carry a device value: dcgm-exporter without per-pod
// attribution), a value that several pods report identically is the device's value
// copied to each sharing pod: an upper bound shared by them, never a per-pod
// measurement. Compute (compressible) is split evenly, so the co-tenants' sum is the
// device's value, not N times it; memory (incompressible: one tenant may hold most of
// it) stays the upper bound for each. A per-process measurement is never a copy, equal
// or not. Pods of namespaces the query does not read are not seen: the agent's sum is
// then a lower bound (dcgm-exporter's copies across namespaces are markCopies').
func (mp mergedPoints) markDevices(signal Signal, byDevice map[string][]*stream, copies bool) {
	if !copies && signal != SignalCompute {
		return // nothing to mark: no copies, and no load for memory
	}
	var pods []podKey
	for _, sts := range byDevice {
		if len(sts) < 2 {
			continue
		}
		eachTime(sts, func(at []timed) {
			if pods = tenants(pods, at); len(pods) < 2 {
				return
			}
			equal, sum := copies, 0.0
			for _, d := range at {
				// The same pod twice (duplicate series) is no copy.
				equal = equal && d.v == at[0].v && (d.st == at[0].st || d.st.id.Pod != at[0].st.id.Pod)
				sum += d.raw
			}
			load := sum
			if equal {
				load = at[0].raw
			}
			copied := equal && at[0].v != 0
			for _, d := range at {
				if p := pointAt(mp[d.st.id], d.t); p != nil {
					p.load(signal, load >= SaturatedActivity)
					if copied {
						p.share(signal, d.v, len(pods))
					}
				}
			}
		})
	}
}

// stream is one answer series of a container on one device, its impossible values
// dropped (decode).
type stream struct {
	id       ContainerID
	src, dev string // the source field (SourceLabel) and deviceKey
	pts      []devPoint
	// pending: samples on a GPU the allocation contradicts, kept as an earlier pod's
	// last window (group).
	pending bool
}

// devPoint is one valid sample of a stream: v a share of the whole GPU (gpuShare), raw
// as read.
type devPoint struct {
	t      model.Time
	v, raw float64
}

// point is one merged sample of a container (decode); shared: a device value copied to
// several pods; cotenant: taken while other pods were on the device, saturated: with the
// device's compute activity at least SaturatedActivity (compute only).
type point struct {
	t                           model.Time
	v                           float64
	src                         *string // the field of the stream the value came from (stream.src)
	shared, cotenant, saturated bool
}

// source is the field the point's value came from, "" where unknown.
func (p point) source() string {
	if p.src == nil {
		return ""
	}
	return *p.src
}

// validPoints returns the stream's samples that can be true for the signal, as shares
// of the whole GPU, counting the others in SamplesDropped by reason.
func validPoints(signal Signal, src string, s *model.SampleStream) []devPoint {
	share := gpuShare(signal, src, s.Metric)
	onMIG := s.Metric[MIGInstanceLabel] != ""
	out := make([]devPoint, 0, len(s.Values))
	for _, p := range s.Values {
		raw := float64(p.Value)
		reason := Invalid(signal, raw)
		if reason == "" && onMIG && src == DCGMGPUUtil {
			reason = DropMIGUnsupported // GPU_UTIL is not supported on MIG: 0 there is not idle
		}
		if reason != "" {
			SamplesDropped.WithLabelValues(string(signal), reason).Inc()
			continue
		}
		out = append(out, devPoint{t: p.Timestamp, v: raw * share, raw: raw})
	}
	return out
}

// timed is one stream's sample at a time (eachTime).
type timed struct {
	devPoint
	st *stream
}

// eachTime calls fn with the samples of the streams at each time, in time order (the
// streams' order within one time).
func eachTime(sts []*stream, fn func([]timed)) {
	var all []timed
	for _, st := range sts {
		for _, p := range st.pts {
			all = append(all, timed{p, st})
		}
	}
	slices.SortStableFunc(all, func(a, b timed) int { return cmp.Compare(a.t, b.t) })
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].t == all[i].t {
			j++
		}
		fn(all[i:j])
		i = j
	}
}

// mergeStreams merges a container's streams (its devices, duplicate series) into one
// sample per time, the largest value (never a sum), in time order, and returns the most
// devices it reported on at one time and the latest time it reported on more than one.
func mergeStreams(sts []*stream) ([]point, int, model.Time) {
	if len(sts) == 1 && increasing(sts[0].pts) { // one series: nothing to merge
		out := make([]point, len(sts[0].pts))
		for i, p := range sts[0].pts {
			out[i] = point{t: p.t, v: p.v, src: &sts[0].src}
		}
		return out, min(1, len(sts[0].dev)), 0
	}
	var out []point
	most := 0
	var multiAt model.Time
	eachTime(sts, func(at []timed) {
		p := point{t: at[0].t, v: at[0].v, src: &at[0].st.src}
		var devs []string
		for _, d := range at {
			if d.v > p.v {
				p.v, p.src = d.v, &d.st.src
			}
			if d.st.dev != "" && !slices.Contains(devs, d.st.dev) {
				devs = append(devs, d.st.dev)
			}
		}
		out = append(out, p)
		most = max(most, len(devs))
		if len(devs) > 1 {
			multiAt = p.t
		}
	})
	return out, most, multiAt
}

// increasing reports whether the points' times strictly increase.
func increasing(pts []devPoint) bool {
	for i := 1; i < len(pts); i++ {
		if pts[i].t <= pts[i-1].t {
			return false
		}
	}
	return true
}

// pointAt returns the point at t of points in time order, or nil.
func pointAt(points []point, t model.Time) *point {
	i, ok := slices.BinarySearchFunc(points, t, func(p point, t model.Time) int { return cmp.Compare(p.t, t) })
	if !ok {
		return nil
	}
	return &points[i]
}

// PerProcess reports whether the published metric is measured per process (gpufrac's
// agent: NVML per-process memory and SM utilisation), so that equal values of two pods
// on one GPU are two measurements that happen to agree, never a device value copied.
func PerProcess(metric string) bool { return fieldOf(metric).PerProcess }

// LowFidelity reports whether the published metric only says a kernel ran, not how much
// of the GPU it used (Field.LowFidelity: DCGM_FI_DEV_GPU_UTIL).
func LowFidelity(metric string) bool { return fieldOf(metric).LowFidelity }

// InstanceRelative reports whether the published metric is, on a MIG instance, a ratio
// of the instance rather than of the whole GPU (Field.InstanceRelative).
func InstanceRelative(metric string) bool { return fieldOf(metric).InstanceRelative }

// fieldOf returns the field a known source publishes under the metric name, or the zero
// Field: the first of Sources' fields (memory, then compute) with that metric. It is
// asked once per compute sample fed to the model (LowFidelity), so the fields are
// indexed once: the scan over every source's fields, copying each Field, was 4 % of a
// 2,000-pod bootstrap's CPU profile (docs/benchmarks.md).
func fieldOf(metric string) Field { return fieldsByMetric()[metric] }

// fieldsByMetric indexes Sources' fields by metric name, the first kept.
var fieldsByMetric = sync.OnceValue(func() map[string]Field {
	out := map[string]Field{}
	for _, src := range Sources {
		for _, sig := range []Signal{SignalMemory, SignalCompute} {
			for _, f := range src.Fields(sig) {
				if _, ok := out[f.Metric]; !ok {
					out[f.Metric] = f
				}
			}
		}
	}
	return out
})

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
//
// The count runs only in the namespaces that hold an impossible sample in its window
// (DirtyNamespaces over the same aligned window; a namespace it finds clean can have no
// count above 0), and not at all where none does: its subquery per reason over every
// series cost about 10 s per load at 1,000 pods (docs/benchmarks.md), where the dirty
// query is three range functions over the raw samples, no subquery. If the dirty query
// fails, every namespace is counted.
func (r *Reader) CountDropped(ctx context.Context, signal Signal, sel Selector, fields []Field, from, to time.Time) (PodDrops, error) {
	_, fromA, toA := sel.countWindow(from, to)
	if toA.After(fromA) && !sel.AllNamespaces {
		if dirty, err := r.DirtyNamespaces(ctx, sel, fields, fromA, toA); err == nil {
			var in []string
			for _, ns := range sel.Namespaces {
				if dirty[ns] {
					in = append(in, ns)
				}
			}
			if len(in) == 0 {
				return PodDrops{}, nil
			}
			sel.Namespaces = in
		}
	}
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
