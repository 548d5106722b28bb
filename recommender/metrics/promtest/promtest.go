// Package promtest serves the Prometheus HTTP query API (/api/v1/query,
// /api/v1/query_range, /api/v1/label/<name>/values and /api/v1/series) and the remote read API
// (/api/v1/read, streamed chunks) from the real PromQL engine (github.com/prometheus/prometheus/promql)
// over an in-process TSDB (util/teststorage), so tests of the recommender's queries run
// them exactly as Prometheus would, on samples the test writes with their exporter's
// published names, labels and units. It is for tests only (it imports testing helpers).
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/teststorage"
)

// Server is an in-process Prometheus: a TSDB, the PromQL engine and an HTTP server.
type Server struct {
	// URL is the httptest server's base URL.
	URL     string
	Storage *teststorage.TestStorage
	Engine  *promql.Engine

	mu       sync.Mutex
	warnings []string
	queries  []string
	fail     error
	failIf   func(query string) bool
	// noRemoteRead: /api/v1/read answers 404 (SetRemoteRead).
	noRemoteRead bool
}

// New starts a server; it stops when the test ends. Out-of-order appends are accepted
// within 60 days, so a test may add history after live samples.
func New(t testing.TB) *Server {
	t.Helper()
	return NewMaxSamples(t, 50_000_000) // Prometheus' default --query.max-samples
}

// NewMaxSamples is New with an engine that refuses a query loading more than maxSamples
// samples at once ("query processing would load too many samples into memory"), as
// Prometheus' --query.max-samples does.
func NewMaxSamples(t testing.TB, maxSamples int) *Server {
	t.Helper()
	st := teststorage.New(t, func(o *tsdb.Options) { o.OutOfOrderTimeWindow = int64(60 * 24 * time.Hour / time.Millisecond) })
	ng := promql.NewEngine(promql.EngineOpts{
		MaxSamples:               maxSamples,
		Timeout:                  time.Minute,
		LookbackDelta:            5 * time.Minute,
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		NoStepSubqueryIntervalFn: func(int64) int64 { return int64(time.Minute / time.Millisecond) },
		Parser:                   parser.NewParser(parser.Options{}),
	})
	t.Cleanup(func() { _ = ng.Close() })
	s := &Server{Storage: st, Engine: ng}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// API returns a client_golang API client for the server.
func (s *Server) API(t testing.TB) promv1.API {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	return promv1.NewAPI(c)
}

// Add writes one series' samples at start, start+step, …; NaN values are written as
// such (a real NaN sample, not a gap); use Gap for a missing sample.
func (s *Server) Add(t testing.TB, lbls map[string]string, start time.Time, step time.Duration, values ...float64) {
	t.Helper()
	app := s.Storage.Appender(context.Background())
	ls := labels.FromMap(lbls)
	for i, v := range values {
		if IsGap(v) {
			continue
		}
		if _, err := app.Append(0, ls, start.Add(time.Duration(i)*step).UnixMilli(), v); err != nil {
			t.Fatalf("append %s: %v", ls, err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

// Record evaluates expr at start, start+step, … up to end, as a rule group evaluating
// every step would, and writes the answer as the recorded series record with the extra
// labels lbls (the rule's labels), skipping the evaluations at the times skip reports
// (nil: none), as a missed evaluation does. A recording that reads another (an hourly
// rule over minute recordings) is recorded after it.
func (s *Server) Record(t testing.TB, record string, lbls map[string]string, expr string, start, end time.Time, step time.Duration, skip func(time.Time) bool) {
	t.Helper()
	ctx := context.Background()
	qry, err := s.Engine.NewRangeQuery(ctx, s.Storage, nil, expr, start, end, step)
	if err != nil {
		t.Fatalf("record %s: %v", record, err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		t.Fatalf("record %s: %v", record, res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		t.Fatalf("record %s: %v", record, err)
	}
	app := s.Storage.Appender(ctx)
	for _, series := range m {
		b := labels.NewBuilder(series.Metric)
		b.Set(model.MetricNameLabel, record)
		for k, v := range lbls {
			b.Set(k, v)
		}
		ls := b.Labels()
		for _, p := range series.Floats {
			if skip != nil && skip(time.UnixMilli(p.T)) {
				continue
			}
			if _, err := app.Append(0, ls, p.T, p.F); err != nil {
				t.Fatalf("record %s: append %s: %v", record, ls, err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

// Repeat returns n copies of v.
func Repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// gap is a NaN payload distinct from the one Prometheus and math.NaN use.
var gap = math.Float64frombits(0x7ff8dead00000000)

// Gap is a value Add skips: no sample at that step.
func Gap() float64 { return gap }

// IsGap reports whether v is Gap().
func IsGap(v float64) bool { return math.Float64bits(v) == math.Float64bits(gap) }

// SetWarnings makes every answer carry these warnings (as Thanos does with a store
// down, with partial responses allowed); nil stops it.
func (s *Server) SetWarnings(w []string) {
	s.mu.Lock()
	s.warnings = w
	s.mu.Unlock()
}

// SetFailure makes every query fail with err (HTTP 503); nil stops it.
func (s *Server) SetFailure(err error) {
	s.SetFailureIf(nil, err)
}

// SetFailureIf makes every query for which match returns true fail with err (HTTP 503),
// as a query that runs past Prometheus' timeout does while the others are answered; nil
// stops it.
func (s *Server) SetFailureIf(match func(query string) bool, err error) {
	s.mu.Lock()
	s.failIf, s.fail = match, err
	s.mu.Unlock()
}

// Queries returns the PromQL received so far, in order: a series request
// (/api/v1/series) as SeriesPrefix and its match[] selectors joined with " or ", a label
// values request as "".
func (s *Server) Queries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

// ServeHTTP answers /api/v1/query, /api/v1/query_range, the label values, the series
// and /api/v1/read like Prometheus' HTTP API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/v1/read" {
		s.remoteRead(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "bad_data", err)
		return
	}
	q := r.Form.Get("query")
	if r.URL.Path == "/api/v1/series" {
		q = SeriesPrefix + strings.Join(r.Form["match[]"], " or ")
	}
	warnings, fail := s.record(q)
	if fail != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", fail)
		return
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/label/"); ok && strings.HasSuffix(name, "/values") {
		s.labelValues(w, r, strings.TrimSuffix(name, "/values"), warnings)
		return
	}
	if r.URL.Path == "/api/v1/series" {
		s.series(w, r, warnings)
		return
	}
	if r.URL.Path != "/api/v1/query" && r.URL.Path != "/api/v1/query_range" {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	qry, err := s.newQuery(r, q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_data", err)
		return
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		writeError(w, 422, "execution", res.Err)
		return
	}
	typ, data, err := encode(res.Value)
	if err != nil {
		writeError(w, 500, "internal", err)
		return
	}
	body := map[string]any{"status": "success", "data": map[string]any{"resultType": typ, "result": data}}
	if len(warnings) > 0 {
		body["warnings"] = warnings
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// SeriesPrefix starts a series request's entry in Queries.
const SeriesPrefix = "series: "

// record adds q to Queries and returns the warnings to answer it with and the failure
// to answer instead (nil: none; SetFailureIf).
func (s *Server) record(q string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries = append(s.queries, q)
	if s.failIf != nil && !s.failIf(q) {
		return s.warnings, nil
	}
	return s.warnings, s.fail
}

// newQuery parses an instant (/api/v1/query: time) or range (/api/v1/query_range:
// start, end, step in seconds) query q from r's form, refusing more than Prometheus'
// 11,000 points per series.
func (s *Server) newQuery(r *http.Request, q string) (promql.Query, error) {
	ctx := r.Context()
	if r.URL.Path == "/api/v1/query" {
		ts := time.Now()
		if v := r.Form.Get("time"); v != "" {
			var err error
			if ts, err = parseTime(v); err != nil {
				return nil, err
			}
		}
		qry, err := s.Engine.NewInstantQuery(ctx, s.Storage, nil, q, ts)
		return qry, err
	}
	var start, end time.Time
	var step float64
	var err error
	if start, err = parseTime(r.Form.Get("start")); err == nil {
		if end, err = parseTime(r.Form.Get("end")); err == nil {
			step, err = strconv.ParseFloat(r.Form.Get("step"), 64)
		}
	}
	if err != nil {
		return nil, err
	}
	if (end.Sub(start).Seconds() / step) > 11000 {
		return nil, fmt.Errorf("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)")
	}
	qry, err := s.Engine.NewRangeQuery(ctx, s.Storage, nil, q, start, end, time.Duration(step*float64(time.Second)))
	return qry, err
}

// timeBounds returns the request's start and end in milliseconds; one that is absent
// or does not parse leaves that side open.
func timeBounds(r *http.Request) (mint, maxt int64) {
	bound := func(key string, def int64) int64 {
		if v := r.Form.Get(key); v != "" {
			if t, err := parseTime(v); err == nil {
				return t.UnixMilli()
			}
		}
		return def
	}
	return bound("start", math.MinInt64), bound("end", math.MaxInt64)
}

// series answers /api/v1/series like Prometheus: the label sets of the series matching
// any match[] selector with a chunk in [start, end] (the TSDB's index with the "series"
// hint, as Prometheus answers it: no sample is read), each once.
func (s *Server) series(w http.ResponseWriter, r *http.Request, warnings []string) {
	if len(r.Form["match[]"]) == 0 {
		writeError(w, http.StatusBadRequest, "bad_data", errors.New("no match[] parameter provided"))
		return
	}
	seen := map[string]bool{}
	data := []model.Metric{}
	s.answerIndex(w, r, warnings, func(q storage.Querier, mint, maxt int64, ms []*labels.Matcher) error {
		ss := q.Select(r.Context(), false, &storage.SelectHints{Start: mint, End: maxt, Func: "series"}, ms...)
		for ss.Next() {
			ls := ss.At().Labels()
			if seen[ls.String()] {
				continue
			}
			seen[ls.String()] = true
			m := model.Metric{}
			ls.Range(func(l labels.Label) { m[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
			data = append(data, m)
		}
		return ss.Err()
	}, func() any { return data })
}

// labelValues answers /api/v1/label/<name>/values like Prometheus: the values of the
// label among the series matching any match[] selector with samples in [start, end]
// (the TSDB's index, as Prometheus answers it: no sample is read). A start or end that
// does not parse leaves that side open.
func (s *Server) labelValues(w http.ResponseWriter, r *http.Request, name string, warnings []string) {
	seen := map[string]bool{}
	values := []string{}
	s.answerIndex(w, r, warnings, func(q storage.Querier, _, _ int64, ms []*labels.Matcher) error {
		vs, _, err := q.LabelValues(r.Context(), name, nil, ms...)
		for _, v := range vs {
			if !seen[v] {
				seen[v] = true
				values = append(values, v)
			}
		}
		return err
	}, func() any { sort.Strings(values); return values })
}

// answerIndex answers an index request (series, label values): each match[] selector
// (none: all series) is passed to read with a querier over the request's [start, end]
// (timeBounds), and the answer's data is what data returns after the last; a selector
// that does not parse is a 400, a read's error a 422.
func (s *Server) answerIndex(w http.ResponseWriter, r *http.Request, warnings []string, read func(q storage.Querier, mint, maxt int64, ms []*labels.Matcher) error, data func() any) {
	mint, maxt := timeBounds(r)
	sets, err := parser.NewParser(parser.Options{}).ParseMetricSelectors(r.Form["match[]"])
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_data", err)
		return
	}
	if len(sets) == 0 {
		sets = [][]*labels.Matcher{nil}
	}
	q, err := s.Storage.Querier(mint, maxt)
	if err != nil {
		writeError(w, 500, "internal", err)
		return
	}
	defer q.Close()
	for _, ms := range sets {
		if err := read(q, mint, maxt, ms); err != nil {
			writeError(w, 422, "execution", err)
			return
		}
	}
	body := map[string]any{"status": "success", "data": data()}
	if len(warnings) > 0 {
		body["warnings"] = warnings
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// encode converts the engine's value to client_golang's model types, whose JSON is
// Prometheus' wire format.
func encode(v parser.Value) (string, any, error) {
	metric := func(ls labels.Labels) model.Metric {
		m := model.Metric{}
		ls.Range(func(l labels.Label) { m[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
		return m
	}
	switch val := v.(type) {
	case promql.Vector:
		out := make(model.Vector, 0, len(val))
		for _, s := range val {
			out = append(out, &model.Sample{Metric: metric(s.Metric), Timestamp: model.Time(s.T), Value: model.SampleValue(s.F)})
		}
		return "vector", out, nil
	case promql.Matrix:
		out := make(model.Matrix, 0, len(val))
		for _, s := range val {
			ss := &model.SampleStream{Metric: metric(s.Metric)}
			for _, p := range s.Floats {
				ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.Time(p.T), Value: model.SampleValue(p.F)})
			}
			out = append(out, ss)
		}
		return "matrix", out, nil
	case promql.Scalar:
		return "scalar", &model.Scalar{Timestamp: model.Time(val.T), Value: model.SampleValue(val.V)}, nil
	}
	return "", nil, fmt.Errorf("unsupported result type %T", v)
}

func parseTime(s string) (time.Time, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time %q: %w", s, err)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
}

func writeError(w http.ResponseWriter, code int, typ string, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": typ, "error": err.Error()})
}

// Quantile is PromQL's quantile_over_time of values sorted ascending (promql/quantile.go):
// linear interpolation between the values at rank q·(n−1), computed in float64 as
// Prometheus does, so a test can predict a recorded quantile bit for bit.
func Quantile(q float64, sorted []float64) float64 {
	rank := q * float64(len(sorted)-1)
	lo := math.Max(0, math.Floor(rank))
	hi := math.Min(float64(len(sorted)-1), lo+1)
	w := rank - math.Floor(rank)
	return sorted[int(lo)]*(1-w) + sorted[int(hi)]*w
}
