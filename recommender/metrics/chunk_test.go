package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/prom"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// A bootstrap larger than the backend's sample limit (40 series × 601 points against an
// engine that loads at most 2,000 samples at once, as --query.max-samples does): with
// MaxSamplesPerQuery the reader sizes its chunks to fit, without it the reader halves
// the chunks the engine refuses; either way every point of every series arrives once.
// An error that is not about size is not retried.
func TestRangeRespectsSampleLimit(t *testing.T) {
	const series, limit = 40, 2000
	s := promtest.NewMaxSamples(t, limit)
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := end.Add(-10 * time.Hour)
	for i := range series {
		s.Add(t, map[string]string{"__name__": DCGMFBUsed, "namespace": "ml", "pod": fmt.Sprintf("p%02d", i), "container": "c", "UUID": fmt.Sprintf("GPU-%d", i)},
			start, time.Minute, promtest.Repeat(float64(1000+i), 601)...)
	}
	for _, maxSamples := range []int{limit * 8 / 10, 0} {
		t.Run(fmt.Sprintf("MaxSamplesPerQuery=%d", maxSamples), func(t *testing.T) {
			r := &Reader{API: s.API(t), Labels: DefaultLabels, MaxSamplesPerQuery: maxSamples}
			refusedBefore := testutil.ToFloat64(Queries.WithLabelValues("range", "too_many_samples"))
			m, err := r.rangeMatrix(context.Background(), DCGMFBUsed, start, end, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			points := map[string]int{}
			for _, st := range m {
				points[string(st.Metric["pod"])] += len(st.Values)
			}
			if len(points) != series {
				t.Fatalf("%d series, want %d", len(points), series)
			}
			for pod, n := range points {
				if n != 601 {
					t.Errorf("%s: %d points, want 601 (each once)", pod, n)
				}
			}
			refused := testutil.ToFloat64(Queries.WithLabelValues("range", "too_many_samples")) - refusedBefore
			if maxSamples > 0 && refused != 0 {
				t.Errorf("%v chunks refused although sized within the limit", refused)
			}
			if maxSamples == 0 && refused == 0 {
				t.Errorf("no chunk refused: the test does not exercise the halving")
			}
		})
	}
	s.SetFailure(errors.New("store gateway unavailable"))
	r := &Reader{API: s.API(t), Labels: DefaultLabels}
	if _, err := r.rangeMatrix(context.Background(), DCGMFBUsed, start, end, time.Minute); err == nil || !strings.Contains(err.Error(), "prometheus range query") {
		t.Errorf("failing backend: %v", err)
	}
}

func TestTooManySamples(t *testing.T) {
	for msg, want := range map[string]bool{
		"execution: query processing would load too many samples into memory in query execution":                       true, // Prometheus, Thanos
		"expanding series: the query exceeded the maximum number of samples (err-mimir-max-fetched-samples-per-query)": true, // Mimir
		"execution: attempted to read series at index 0 from stream, but the stream has failed: the query exceeded the maximum number of chunks (limit: 2 chunks) (err-mimir-max-chunks-per-query). To adjust the related per-tenant limit, configure -querier.max-fetched-chunks-per-query, or contact your service administrator.": true,
		"execution: the query exceeded the aggregated chunks size limit (limit: 100 bytes) (err-mimir-max-chunks-bytes-per-query)":                     true,
		"execution: the query exceeded the maximum number of series (limit: 1 series) (err-mimir-max-series-per-query)":                                true,
		"execution: the query exceeded the estimated number of chunks (err-mimir-max-estimated-chunks-per-query)":                                      true,
		"execution: the query exceeded the maximum allowed estimated amount of memory consumed (err-mimir-max-estimated-memory-consumption-per-query)": true,
		"bad_data: the query time range exceeds the limit (query length: 193h0m0s, limit: 168h0m0s) (err-mimir-max-query-length)":                      true,
		"execution: the query hit the max number of chunks limit (limit: 2000000 chunks)":                                                              true, // Cortex
		"execution: the query hit the aggregated chunks size limit (limit: 1 bytes)":                                                                   true,
		"execution: the query hit the aggregated data size limit (limit: 1 bytes)":                                                                     true,
		"execution: the query hit the max number of series limit (limit: 1 series)":                                                                    true,
		"execution: rpc error: code = Code(422) desc = exceeded chunks limit: limit 1 violated (got 2)":                                                true, // store gateway
		"execution: exceeded bytes limit: limit 1 violated (got 2)":                                                                                    true,
		"execution: exceeded series limit: limit 1 violated (got 2)":                                                                                   true,
		"422: cannot select more than -search.maxSamplesPerQuery=1000 samples; possible solutions: increase the -search.maxSamplesPerQuery; reduce time range for the query; use more specific label filters in order to select fewer series": true, // VictoriaMetrics
		"422: cannot process more than 1000 samples per series; either increase -search.maxSamplesPerSeries or reduce time range for the query":                                                                                               true,
		"422: the number of matching timeseries exceeds 300000; either narrow down the search or increase -search.maxUniqueTimeseries":                                                                                                        true,
		"server error: 503 store gateway unavailable": false, // retried as a failure, not smaller
		"execution: too many outstanding requests":    false,
	} {
		if got := TooManySamples(errors.New(msg)); got != want {
			t.Errorf("%q: %v, want %v", msg, got, want)
		}
	}
}

// A backend's limit error reaches the reader in the body of its answer where the status
// is not Prometheus' 400 or 422 with JSON: a Cortex or Thanos query-frontend writes a
// querier's limit error as plain text, which client_golang reads as "client error: 422"
// with the message only in promv1.Error.Detail. Such a chunk is refused as too large and
// halved, as Prometheus' own JSON answer is.
// readsAllCounting reads the whole range from a backend that refuses every chunk longer
// than 90 minutes with status, contentType and body (backendRefusing) and checks that a chunk was
// counted under result (the range query's gpufrac_recommender_prometheus_queries_total
// label: the refusal was read as a reason to halve it).
func readsAllCounting(t *testing.T, status int, contentType, body, result string) {
	t.Helper()
	r, start, end := slowReader(t)
	r.API = backendRefusing(t, r.API.(slowAPI).server, status, contentType, body)
	before := testutil.ToFloat64(Queries.WithLabelValues("range", result))
	readsAll(t, r, start, end)
	if testutil.ToFloat64(Queries.WithLabelValues("range", result)) == before {
		t.Errorf("no chunk counted as %s", result)
	}
}

func TestRangeHalvesOnALimitInTheBody(t *testing.T) {
	for name, c := range map[string]struct {
		status            int
		contentType, body string
	}{
		"cortex query-frontend, plain text": {422, "text/plain; charset=utf-8", "the query hit the max number of chunks limit (limit: 2000000 chunks)\n"},
		"mimir, JSON":                       {422, "application/json", `{"status":"error","errorType":"execution","error":"the query exceeded the maximum number of chunks (limit: 2 chunks) (err-mimir-max-chunks-per-query)"}`},
		"victoriametrics, JSON":             {422, "application/json", `{"status":"error","errorType":"422","error":"error when executing query=\"DCGM_FI_DEV_FB_USED\": cannot select more than -search.maxSamplesPerQuery=1000 samples; possible solutions: increase the -search.maxSamplesPerQuery; reduce time range for the query; use more specific label filters in order to select fewer series"}`},
	} {
		t.Run(name, func(t *testing.T) {
			readsAllCounting(t, c.status, c.contentType, c.body, "too_many_samples")
		})
	}
}

// slowAPI times out every range query longer than limit, as a loaded Prometheus does
// with a heavy query over days of history.
type slowAPI struct {
	promv1.API
	limit time.Duration
	// server is the test Prometheus the API reads.
	server *promtest.Server
}

func (s slowAPI) QueryRange(ctx context.Context, q string, r promv1.Range, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	if r.End.Sub(r.Start) > s.limit {
		return nil, nil, nil, fmt.Errorf("Post \"http://prometheus/api/v1/query_range\": %w", context.DeadlineExceeded)
	}
	return s.API.QueryRange(ctx, q, r, opts...)
}

// slowReader is a Reader over one memory series of 601 per-minute points ending at end,
// whose API times out every range query longer than 90 minutes.
func slowReader(t *testing.T) (r *Reader, start, end time.Time) {
	s := promtest.New(t)
	end = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start = end.Add(-10 * time.Hour)
	s.Add(t, map[string]string{"__name__": DCGMFBUsed, "namespace": "ml", "pod": "p", "container": "c", "UUID": "GPU-1"},
		start, time.Minute, promtest.Repeat(1000, 601)...)
	return &Reader{API: slowAPI{API: s.API(t), limit: 90 * time.Minute, server: s}, Labels: DefaultLabels}, start, end
}

// readsAll checks that r's range read of [start, end] returns all 601 points, in one
// stream (the chunks of one series are joined).
func readsAll(t *testing.T, r *Reader, start, end time.Time) {
	t.Helper()
	m, err := r.rangeMatrix(context.Background(), DCGMFBUsed, start, end, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 {
		t.Errorf("%d streams of one series, want 1", len(m))
	}
	n := 0
	for _, st := range m {
		n += len(st.Values)
	}
	if n != 601 {
		t.Errorf("%d points, want 601", n)
	}
}

// A chunk that times out is halved and retried, so a bootstrap whose full chunks are
// too slow still arrives whole; a cancelled caller is not retried.
func TestRangeHalvesOnTimeout(t *testing.T) {
	r, start, end := slowReader(t)
	before := testutil.ToFloat64(Queries.WithLabelValues("range", "timeout"))
	readsAll(t, r, start, end)
	if testutil.ToFloat64(Queries.WithLabelValues("range", "timeout")) == before {
		t.Error("no timeout counted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.rangeMatrix(ctx, DCGMFBUsed, start, end, time.Minute); err == nil {
		t.Error("a cancelled caller got an answer")
	}
}

// A timed-out chunk is retried at half the points it asked for, not half of the
// chunk ceiling: a range shorter than MaxPointsPerSeries (601 points here, against
// 11,000) gets a smaller query at the first retry instead of the same range again until
// the ceiling drops below it. With queries over 90 minutes timing out: a first chunk of
// FirstChunkPoints (60), then the 541 points left → 270 → 135 → 67, three timeouts, then
// every chunk fits.
func TestRangeHalvesTheChunkAsked(t *testing.T) {
	r, start, end := slowReader(t)
	timeouts := testutil.ToFloat64(Queries.WithLabelValues("range", "timeout"))
	ok := testutil.ToFloat64(Queries.WithLabelValues("range", "ok"))
	readsAll(t, r, start, end)
	if got := testutil.ToFloat64(Queries.WithLabelValues("range", "timeout")) - timeouts; got != 3 {
		t.Errorf("%v timed-out queries, want 3 (541, 270 and 135 points)", got)
	}
	if got := testutil.ToFloat64(Queries.WithLabelValues("range", "ok")) - ok; got != 10 {
		t.Errorf("%v answered queries, want 10 (60 points, then 541 in chunks of 67)", got)
	}
}

// A chunk that took more than half the timeout is followed by one sized to take about
// half (issue 17: on a loaded Prometheus the next chunk of the same size ran into the
// timeout and was retried at half, wasting the whole timeout); a fast chunk is followed
// by a larger one, never above MaxPointsPerSeries and never below one point.
func TestRangePacesChunksToHalfTheTimeout(t *testing.T) {
	r := &Reader{Timeout: 30 * time.Second}
	for _, c := range []struct {
		asked int
		took  time.Duration
		want  int
	}{
		{720, 25 * time.Second, 432},
		{720, 15 * time.Second, 720},
		{120, 5 * time.Second, 360},
		{5000, time.Second, MaxPointsPerSeries},
		{1, time.Hour, 1},
	} {
		if got := r.paced(c.asked, c.took); got != c.want {
			t.Errorf("paced(%d points, took %s) = %d, want %d", c.asked, c.took, got, c.want)
		}
	}
}

// backendRefusing serves s through the client every component builds (prom.Config.API),
// answering every range query longer than 90 minutes with status and body, as a backend
// whose own limit or timeout is below such a chunk does.
func backendRefusing(t *testing.T, s *promtest.Server, status int, contentType, body string) promv1.API {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err == nil && r.URL.Path == "/api/v1/query_range" {
			start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
			end, _ := strconv.ParseFloat(r.Form.Get("end"), 64)
			if end-start > (90 * time.Minute).Seconds() {
				w.Header().Set("Content-Type", contentType)
				w.WriteHeader(status)
				_, _ = w.Write([]byte(body))
				return
			}
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	api, err := (&prom.Config{URL: srv.URL}).API()
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// A backend's own timeout reaches the reader as an HTTP answer, not as the reader's
// context deadline: Prometheus, Thanos Query and Mimir answer a query past their
// --query.timeout with 503 and errorType "timeout" (read by client_golang as a server
// error, the type only in the body), and a query-frontend (Cortex, Thanos) or a proxy
// in front (an ingress) with 504 Gateway Timeout. Each is a timed-out chunk: halved and
// retried, so the load arrives whole. Before, only the reader's own deadline counted,
// and a --prometheus-timeout above the backend's failed every history load, every
// cycle, with "server_error: server error: 503".
func TestRangeHalvesOnTheBackendsTimeout(t *testing.T) {
	for name, c := range map[string]struct {
		status            int
		contentType, body string
	}{
		"prometheus --query.timeout": {503, "application/json", `{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`},
		"query-frontend 504":         {504, "text/plain; charset=utf-8", "context deadline exceeded\n"},
		"ingress 504":                {504, "text/html", "<html><head><title>504 Gateway Time-out</title></head><body><center><h1>504 Gateway Time-out</h1></center></body></html>"},
	} {
		t.Run(name, func(t *testing.T) {
			readsAllCounting(t, c.status, c.contentType, c.body, "timeout")
		})
	}
	// Unavailable is not a timeout: retried by the next cycle, not in smaller chunks.
	r, start, end := slowReader(t)
	r.API = backendRefusing(t, r.API.(slowAPI).server, 503, "application/json", `{"status":"error","errorType":"unavailable","error":"too many queries in flight"}`)
	if _, err := r.rangeMatrix(context.Background(), DCGMFBUsed, start, end, time.Minute); err == nil {
		t.Error("an unavailable backend's answer was read")
	}
}
