package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// bodyTransport answers every request with a fixed status and body: the real client
// and decoder run, without a network.
type bodyTransport struct {
	status int
	body   []byte
	reqs   []*http.Request
}

func (b *bodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	b.reqs = append(b.reqs, r)
	return &http.Response{StatusCode: b.status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(b.body)), Request: r}, nil
}

func reader(t testing.TB, status int, body string) (*Reader, *bodyTransport) {
	tr := &bodyTransport{status: status, body: []byte(body)}
	c, err := api.NewClient(api.Config{Address: "http://prometheus.invalid", RoundTripper: tr})
	if err != nil {
		t.Fatal(err)
	}
	return &Reader{API: promv1.NewAPI(c), Labels: DefaultLabels}, tr
}

func TestInstantDropsImpossibleValues(t *testing.T) {
	body := `{"status":"success","data":{"resultType":"vector","result":[
	 {"metric":{"namespace":"a","pod":"p1","container":"c"},"value":[1700000000,"1073741824"]},
	 {"metric":{"namespace":"a","pod":"p1","container":"c","Hostname":"other-exporter"},"value":[1700000000,"2147483648"]},
	 {"metric":{"namespace":"a","pod":"p2","container":"c"},"value":[1700000000,"9.671406556917033e+24"]},
	 {"metric":{"namespace":"a","pod":"p3","container":"c"},"value":[1700000000,"NaN"]},
	 {"metric":{"namespace":"a","pod":"p4","container":"c"},"value":[1700000000,"-5"]},
	 {"metric":{"namespace":"a","pod":"p5","container":"c"},"value":[1700000000,"+Inf"]},
	 {"metric":{"namespace":"a","pod":"","container":"c"},"value":[1700000000,"1"]}
	]}}`
	r, _ := reader(t, 200, body)
	before := map[string]float64{}
	for _, reason := range []string{DropOutOfRange, DropNaN, DropNegative, DropInf, DropNoLabels} {
		before[reason] = testutil.ToFloat64(SamplesDropped.WithLabelValues("memory", reason))
	}
	got, err := r.Instant(context.Background(), SignalMemory, "q", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID.Pod != "p1" {
		t.Fatalf("want only p1, got %+v", got)
	}
	// Two series of one container (two exporter instances): max, never the sum.
	if v := got[0].Samples[0].Value; v != 2147483648 {
		t.Errorf("merged value %v, want the max 2147483648", v)
	}
	for reason, n := range map[string]float64{DropOutOfRange: 1, DropNaN: 1, DropNegative: 1, DropInf: 1, DropNoLabels: 1} {
		if d := testutil.ToFloat64(SamplesDropped.WithLabelValues("memory", reason)) - before[reason]; d != n {
			t.Errorf("dropped[%s] += %v, want %v", reason, d, n)
		}
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		s    Signal
		v    float64
		want string
	}{
		{SignalCompute, 0.5, ""}, {SignalCompute, 1.2, DropOutOfRange}, {SignalCompute, -0.1, DropNegative},
		{SignalMemory, 80 << 30, ""}, {SignalMemory, 9223372036854775794, DropOutOfRange}, {SignalMemory, math.NaN(), DropNaN},
		{SignalMemory, math.Inf(-1), DropInf},
	} {
		if got := Invalid(tc.s, tc.v); got != tc.want {
			t.Errorf("Invalid(%s, %v) = %q, want %q", tc.s, tc.v, got, tc.want)
		}
	}
}

func TestErrorsAreErrors(t *testing.T) {
	r, _ := reader(t, 422, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}`)
	_, err := r.Instant(context.Background(), SignalMemory, "q", time.Now())
	if err == nil || !strings.Contains(err.Error(), "too many samples") {
		t.Fatalf("want the Prometheus error, got %v", err)
	}
	r, _ = reader(t, 200, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	got, err := r.Instant(context.Background(), SignalMemory, "q", time.Now())
	if err != nil || len(got) != 0 {
		t.Fatalf("empty is no series (not a zero): %v %v", got, err)
	}
}

func TestRangeIsChunked(t *testing.T) {
	r, tr := reader(t, 200, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
	end := time.Unix(1700000000, 0)
	if _, err := r.Range(context.Background(), SignalCompute, "q", end.Add(-8*24*time.Hour), end, time.Minute); err != nil {
		t.Fatal(err)
	}
	// 8 days at 1m = 11,521 points: a first chunk of FirstChunkPoints, then (answered at
	// once) 11,000 and the rest; none over 11,000 points.
	if len(tr.reqs) != 3 {
		t.Fatalf("%d range requests, want 3", len(tr.reqs))
	}
	for _, req := range tr.reqs {
		_ = req.ParseForm()
		var start, stop float64
		parse := func(s string) float64 { f, _ := time.ParseDuration(s + "s"); return f.Seconds() }
		start, stop = parse(req.Form.Get("start")), parse(req.Form.Get("end"))
		if pts := (stop-start)/60 + 1; pts > MaxPointsPerSeries {
			t.Errorf("chunk of %v points", pts)
		}
	}
}

func TestDCGMQueries(t *testing.T) {
	sel := Selector{Labels: DefaultLabels, Namespaces: []string{"b", "a.x"}}
	sel.Direct = true
	mem := DCGM{}.MemoryPeakQuery(sel, time.Hour)
	// Raw window max where every raw sample is valid, else the same over a subquery
	// whose impossible samples were filtered out (values: TestImpossibleSamplesAreCounted
	// on the real engine).
	sel1 := `DCGM_FI_DEV_FB_USED{namespace=~"a\\.x|b",pod!=""}`
	for _, want := range []string{
		`max by (namespace, pod, container) (((max_over_time(` + sel1 + `[3600s]) >= 0 <= 4.194304e+06 and max_over_time(` + sel1 + `[3600s]) <= 4.194304e+06 and min_over_time(` + sel1 + `[3600s]) >= 0`,
		` or (max_over_time((` + sel1 + ` >= 0 <= 4.194304e+06)[3600s:15s]) and count_over_time(` + sel1 + `[3600s])))) * 1048576`,
	} {
		if !strings.Contains(mem, want) {
			t.Errorf("memory query\n got %s\nwant it to contain %s", mem, want)
		}
	}
	sel.Direct = false
	// Series scraped without honor_labels: exported_* labels are copied over the
	// exporter's own namespace, pod and container.
	mem = DCGM{}.MemoryPeakQuery(sel, time.Hour)
	for _, s := range []string{`DCGM_FI_DEV_FB_USED{namespace=~"a\\.x|b",pod!="",exported_pod=""}`, `DCGM_FI_DEV_FB_USED{exported_namespace=~"a\\.x|b",exported_pod!=""}`,
		`"pod", "$1", "exported_pod", "(.*)")`} {
		if !strings.Contains(mem, s) {
			t.Errorf("memory query lacks %q: %s", s, mem)
		}
	}
	cpu := DCGM{}.ComputeQuery(sel, time.Minute)
	for _, s := range []string{DCGMSMActive, DCGMGREngineActive, DCGMGPUUtil + `{namespace=~"a\\.x|b",pod!="",exported_pod=""}[60s]) >= 0 <= 100`, " or on (namespace, pod, container) "} {
		if !strings.Contains(cpu, s) {
			t.Errorf("compute query lacks %q: %s", s, cpu)
		}
	}
}

// FuzzDecode feeds arbitrary response bodies through the real client and decoder: no
// panic, and every returned sample is a plausible value.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"a","pod":"p","container":"c"},"value":[1,"0.5"]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"a","pod":"p"},"values":[[1,"NaN"],[2,"1e400"]]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}`))
	f.Add([]byte(`{"status":"error","error":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, sig := range []Signal{SignalMemory, SignalCompute} {
			r, _ := reader(t, 200, string(body))
			series, err := r.Instant(context.Background(), sig, "q", time.Unix(1, 0))
			if err != nil {
				continue
			}
			for _, s := range series {
				if s.ID.Namespace == "" || s.ID.Pod == "" {
					t.Fatalf("series without workload labels: %+v", s.ID)
				}
				for _, p := range s.Samples {
					if Invalid(sig, p.Value) != "" {
						t.Fatalf("impossible value %v returned", p.Value)
					}
				}
			}
			if _, err := r.Range(context.Background(), sig, "q", time.Unix(0, 0), time.Unix(600, 0), time.Minute); err != nil {
				continue
			}
		}
	})
}

// TestHostileData runs one response per kind of bad or ambiguous data through the real
// decoder and checks exactly what comes out.
func TestHostileData(t *testing.T) {
	vec := func(samples ...string) string {
		return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
	}
	tests := []struct {
		name   string
		signal Signal
		body   string
		want   map[string]float64 // pod → value
		shared map[string]int     // pod → shared samples
	}{
		{
			name: "two pods on one GPU with the device's compute copied to each: split between them, flagged shared",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1"},"value":[1,"0.6"]}`,
				`{"metric":{"namespace":"a","pod":"p2","container":"c","UUID":"GPU-1"},"value":[1,"0.6"]}`),
			signal: SignalCompute, want: map[string]float64{"p1": 0.3, "p2": 0.3}, shared: map[string]int{"p1": 1, "p2": 1},
		},
		{
			name: "two pods on one GPU with the device's memory copied to each: kept as upper bound, flagged shared",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1"},"value":[1,"8e9"]}`,
				`{"metric":{"namespace":"a","pod":"p2","container":"c","UUID":"GPU-1"},"value":[1,"8e9"]}`),
			signal: SignalMemory, want: map[string]float64{"p1": 8e9, "p2": 8e9}, shared: map[string]int{"p1": 1, "p2": 1},
		},
		{
			name: "two pods with equal per-process agent values on one GPU: two measurements, not shared",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","gpufrac_source":"gpufrac_pod_gpu_memory_used_bytes"},"value":[1,"8e9"]}`,
				`{"metric":{"namespace":"a","pod":"p2","container":"c","UUID":"GPU-1","gpufrac_source":"gpufrac_pod_gpu_memory_used_bytes"},"value":[1,"8e9"]}`),
			signal: SignalMemory, want: map[string]float64{"p1": 8e9, "p2": 8e9}, shared: map[string]int{},
		},
		{
			name: "two pods on one GPU with their own values (per-pod attribution): not shared",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1"},"value":[1,"0.2"]}`,
				`{"metric":{"namespace":"a","pod":"p2","container":"c","UUID":"GPU-1"},"value":[1,"0.4"]}`),
			signal: SignalCompute, want: map[string]float64{"p1": 0.2, "p2": 0.4}, shared: map[string]int{},
		},
		{
			name: "one pod seen by two exporter instances (Hostname differs): max, not shared, not summed",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","Hostname":"old"},"value":[1,"0.3"]}`,
				`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","Hostname":"new"},"value":[1,"0.5"]}`),
			signal: SignalCompute, want: map[string]float64{"p1": 0.5}, shared: map[string]int{},
		},
		{
			name: "one pod seen by two exporters with the same value (instance and job differ): one pod, not a copy split between two",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","instance":"10.0.0.1:9400","job":"dcgm"},"value":[1,"0.5"]}`,
				`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","instance":"10.0.0.2:9400","job":"gpu-operator"},"value":[1,"0.5"]}`),
			signal: SignalCompute, want: map[string]float64{"p1": 0.5}, shared: map[string]int{},
		},
		{
			name: "MIG instance: GPU_UTIL is unsupported there, dropped rather than read as idle",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","GPU_I_ID":"3","gpufrac_source":"DCGM_FI_DEV_GPU_UTIL"},"value":[1,"0"]}`,
				`{"metric":{"namespace":"a","pod":"p2","container":"c","UUID":"GPU-1","GPU_I_ID":"4","gpufrac_source":"DCGM_FI_PROF_GR_ENGINE_ACTIVE"},"value":[1,"0.25"]}`),
			signal: SignalCompute, want: map[string]float64{"p2": 0.25}, shared: map[string]int{},
		},
		{
			name: "MIG instances of one GPU are separate devices: equal values are not a shared copy",
			body: vec(`{"metric":{"namespace":"a","pod":"p1","container":"c","UUID":"GPU-1","GPU_I_ID":"1"},"value":[1,"1048576000"]}`,
				`{"metric":{"namespace":"a","pod":"p2","container":"c","UUID":"GPU-1","GPU_I_ID":"2"},"value":[1,"1048576000"]}`),
			signal: SignalMemory, want: map[string]float64{"p1": 1048576000, "p2": 1048576000}, shared: map[string]int{},
		},
		{
			name:   "ratio above 1 and NaN dropped",
			body:   vec(`{"metric":{"namespace":"a","pod":"p1","container":"c"},"value":[1,"1.7"]}`, `{"metric":{"namespace":"a","pod":"p2","container":"c"},"value":[1,"NaN"]}`),
			signal: SignalCompute, want: map[string]float64{}, shared: map[string]int{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := reader(t, 200, tc.body)
			r.Device = DCGM{}.DeviceLabels()
			series, err := r.Instant(context.Background(), tc.signal, "q", time.Unix(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			got, shared := map[string]float64{}, map[string]int{}
			for _, s := range series {
				if len(s.Samples) != 1 {
					t.Fatalf("%s: %d samples", s.ID, len(s.Samples))
				}
				got[s.ID.Pod] = s.Samples[0].Value
				if s.SharedSamples > 0 {
					shared[s.ID.Pod] = s.SharedSamples
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || fmt.Sprint(shared) != fmt.Sprint(tc.shared) {
				t.Errorf("got %v shared %v, want %v shared %v", got, shared, tc.want, tc.shared)
			}
		})
	}
}

// Kind 2 (issue 13): detection lists every source with a series of any of its fields
// (HAMi ≤ 2.8's legacy names, a compute field alone) over the window, in order of
// preference, through the label-values API over the window; none found is no error.
func TestDetectSources(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`["hami_vgpu_memory_used_bytes","DCGM_FI_DEV_FB_USED"]`, "hami,dcgm"},
		{`["DCGM_FI_PROF_SM_ACTIVE","Device_utilization_desc_of_container","gpufrac_pod_gpu_memory_used_bytes"]`, "agent,hami,dcgm"},
		{`["vGPU_device_memory_usage_in_bytes"]`, "hami"},
		{`[]`, ""},
	} {
		r, tr := reader(t, 200, `{"status":"success","data":`+tc.body+`}`)
		from, to := time.Unix(1000, 0), time.Unix(1000+8*86400, 0)
		src, err := DetectSources(context.Background(), r, from, to)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range src {
			got = append(got, s.Name())
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%s: got %v, want %s", tc.body, got, tc.want)
		}
		req := tr.reqs[len(tr.reqs)-1]
		if err := req.ParseForm(); err != nil {
			t.Fatal(err)
		}
		if req.URL.Path != "/api/v1/label/__name__/values" || req.Form.Get("start") != "1000" || req.Form.Get("end") != "692200" ||
			!strings.Contains(req.Form.Get("match[]"), "vGPU_device_memory_usage_in_bytes") || !strings.Contains(req.Form.Get("match[]"), "gpu_fractioning_gpu_sm_utilization_percent") {
			t.Errorf("request %s %v: want the label values of __name__ over the window matching every field", req.URL.Path, req.Form)
		}
	}
	r, _ := reader(t, 200, `{"status":"success","warnings":["store down"],"data":["DCGM_FI_DEV_FB_USED"]}`)
	if _, err := DetectSources(context.Background(), r, time.Unix(1, 0), time.Unix(2, 0)); !errors.Is(err, ErrPartialResponse) {
		t.Errorf("a partial answer: got %v, want ErrPartialResponse", err)
	}
}

// sortByID orders series as ContainerID.String orders them, where that differs from
// comparing namespace, pod and container in turn ("a-x" sorts before "a/…").
func TestSortByIDKeepsStringOrder(t *testing.T) {
	ids := []ContainerID{{"a", "p", "c"}, {"a-x", "p", "c"}, {"a", "p-1", "c"}, {"a", "p", "b"}, {"b", "a", "a"}, {"a", "p", ""}}
	out := make([]Series, len(ids))
	for i, id := range ids {
		out[i] = Series{ID: id, Samples: []Sample{{Value: float64(i)}}}
	}
	sortByID(out)
	for i := 1; i < len(out); i++ {
		if out[i-1].ID.String() > out[i].ID.String() {
			t.Errorf("%s before %s", out[i-1].ID, out[i].ID)
		}
	}
	for _, s := range out {
		if ids[int(s.Samples[0].Value)] != s.ID {
			t.Errorf("series %s moved without its samples", s.ID)
		}
	}
	if out[0].ID.Namespace != "a-x" {
		t.Errorf("first %s, want a-x/p/c (string order)", out[0].ID)
	}
}

// An answer with a sample stamped outside the time the query evaluated is no Prometheus
// answer (Prometheus and Thanos stamp each sample at an evaluation time; a sample
// without a value decodes at time 0 as 0): the query fails with ErrSampleOutsideQuery
// instead of feeding the history a value from the future (which would hide every later
// sample of the container) or a zero. Stamps within MaxSampleSkew (VictoriaMetrics and
// Mimir align a range query to its step) are read.
func TestSamplesOutsideTheQueryAreRefused(t *testing.T) {
	at := time.Unix(1700000000, 0)
	sample := func(ts time.Time) string {
		return fmt.Sprintf(`{"metric":{"namespace":"a","pod":"p","container":"c"},"value":[%d,"1073741824"]}`, ts.Unix())
	}
	points := func(ts ...time.Time) string {
		var pts []string
		for _, p := range ts {
			pts = append(pts, fmt.Sprintf(`[%d,"0.5"]`, p.Unix()))
		}
		return `{"metric":{"namespace":"a","pod":"p","container":"c"},"values":[` + strings.Join(pts, ",") + `]}`
	}
	vec := func(s string) string {
		return `{"status":"success","data":{"resultType":"vector","result":[` + s + `]}}`
	}
	mat := func(s string) string {
		return `{"status":"success","data":{"resultType":"matrix","result":[` + s + `]}}`
	}
	for _, tc := range []struct {
		name, body string
		instant    bool
		refused    bool
	}{
		{"instant at the evaluation time", vec(sample(at)), true, false},
		{"instant a day in the future", vec(sample(at.Add(24 * time.Hour))), true, true},
		{"instant without a value", vec(`{"metric":{"namespace":"a","pod":"p","container":"c"}}`), true, true},
		{"instant within the skew", vec(sample(at.Add(-30 * time.Second))), true, false},
		{"range inside", mat(points(at.Add(-time.Minute), at)), false, false},
		{"range aligned a step outside", mat(points(at.Add(-31*time.Minute), at.Add(time.Minute))), false, false},
		{"range with a point in the future", mat(points(at.Add(-time.Minute), at.Add(2*time.Hour))), false, true},
		{"range with a point at time 0", mat(points(time.Unix(0, 0), at)), false, true},
	} {
		r, _ := reader(t, 200, tc.body)
		var err error
		var got []Series
		if tc.instant {
			got, err = r.Instant(context.Background(), SignalMemory, "q", at)
		} else {
			got, err = r.Range(context.Background(), SignalCompute, "q", at.Add(-30*time.Minute), at, time.Minute) // one chunk
		}
		if tc.refused != errors.Is(err, ErrSampleOutsideQuery) || (tc.refused && got != nil) || (!tc.refused && (err != nil || len(got) != 1)) {
			t.Errorf("%s: got %v, %v; want refused %v", tc.name, got, err, tc.refused)
		}
	}
}

// An answer with a status other than 400 or 422, or whose body is not Prometheus' JSON,
// reaches the reader as client_golang's bare "server error: 503" or "client error: 429",
// the backend's reason only in the body (promv1.Error.Detail). The error the reader
// returns, which MetricsUnavailable=PrometheusError and the cycle's log show, names that
// reason (JSON's error field, or the body's text without markup, at most
// maxBodyReason bytes), and errors.As still finds the *promv1.Error. Before, every such
// cycle said only "server_error: server error: 503".
func TestErrorsNameTheBodysReason(t *testing.T) {
	for name, c := range map[string]struct {
		status int
		body   string
		want   string
	}{
		"prometheus unavailable": {503, `{"status":"error","errorType":"unavailable","error":"TSDB not ready"}`, "unavailable: TSDB not ready"},
		"mimir 429 plain text":   {429, "too many outstanding requests\n", "too many outstanding requests"},
		"ingress 502 page":       {502, "<html><head><title>502 Bad Gateway</title></head>\n<body><center><h1>502 Bad Gateway</h1></center></body></html>", "502 Bad Gateway 502 Bad Gateway"},
		"long body":              {500, strings.Repeat("x", 2000), strings.Repeat("x", maxBodyReason)},
	} {
		t.Run(name, func(t *testing.T) {
			r, _ := reader(t, c.status, c.body)
			_, err := r.Instant(context.Background(), SignalMemory, "q", time.Now())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("instant: %v, want it to name %q", err, c.want)
			}
			var pe *promv1.Error
			if !errors.As(err, &pe) {
				t.Errorf("instant: %v is no *promv1.Error", err)
			}
			if len(err.Error()) > maxBodyReason+200 {
				t.Errorf("instant: %d bytes of error", len(err.Error()))
			}
			end := time.Unix(1700000000, 0)
			if _, err := r.Range(context.Background(), SignalMemory, "q", end.Add(-time.Hour), end, time.Minute); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("range: %v, want it to name %q", err, c.want)
			}
		})
	}
	// Prometheus' own 422 carries its reason in the message already: not repeated.
	r, _ := reader(t, 422, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}`)
	_, err := r.Instant(context.Background(), SignalMemory, "q", time.Now())
	if err == nil || strings.Count(err.Error(), "too many samples") != 1 {
		t.Errorf("422: %v", err)
	}
}
