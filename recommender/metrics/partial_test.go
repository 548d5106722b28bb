package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// An answer of status success that carries warnings may omit series (Thanos, Mimir or
// Cortex with a store down): Vector, Instant and Range return ErrPartialResponse and no
// data, and the answer is counted.
func TestWarningsAreIncomplete(t *testing.T) {
	vec := `{"status":"success","warnings":["store 10.0.0.3:10901 unavailable"],"data":{"resultType":"vector","result":[
	 {"metric":{"namespace":"a","pod":"p1","container":"c"},"value":[1700000000,"1073741824"]}]}}`
	mat := `{"status":"success","warnings":["store 10.0.0.3:10901 unavailable"],"data":{"resultType":"matrix","result":[
	 {"metric":{"namespace":"a","pod":"p1","container":"c"},"values":[[1700000000,"0.5"]]}]}}`
	partials := func() float64 { return testutil.ToFloat64(Incomplete.WithLabelValues(IncompletePartialResponse)) }
	queries := func(kind string) float64 { return testutil.ToFloat64(Queries.WithLabelValues(kind, "partial")) }

	before, beforeQ := partials(), queries("instant")
	r, _ := reader(t, 200, vec)
	v, err := r.Vector(context.Background(), "q", time.Unix(1700000000, 0))
	if !errors.Is(err, ErrPartialResponse) || v != nil {
		t.Fatalf("Vector: want ErrPartialResponse and no data, got %v, %v", v, err)
	}
	var pe *PartialResponseError
	if !errors.As(err, &pe) || len(pe.Warnings) != 1 || pe.Query != "q" {
		t.Errorf("want the warnings and query in the error, got %#v", err)
	}
	s, err := r.Instant(context.Background(), SignalMemory, "q", time.Unix(1700000000, 0))
	if !errors.Is(err, ErrPartialResponse) || s != nil {
		t.Fatalf("Instant: want ErrPartialResponse and no series, got %v, %v", s, err)
	}
	if d := partials() - before; d != 2 {
		t.Errorf("incomplete_data{partial_response} += %v, want 2", d)
	}
	if d := queries("instant") - beforeQ; d != 2 {
		t.Errorf("queries{instant,partial} += %v, want 2", d)
	}

	before = partials()
	r, tr := reader(t, 200, mat)
	end := time.Unix(1700000000, 0)
	s, err = r.Range(context.Background(), SignalCompute, "q", end.Add(-time.Hour), end, time.Minute)
	if !errors.Is(err, ErrPartialResponse) || s != nil {
		t.Fatalf("Range: want ErrPartialResponse and no series, got %v, %v", s, err)
	}
	if len(tr.reqs) != 1 {
		t.Errorf("%d requests: a partial chunk must stop the load", len(tr.reqs))
	}
	if d := partials() - before; d != 1 {
		t.Errorf("incomplete_data{partial_response} += %v, want 1", d)
	}

	// Infos (PromQL annotations) do not make an answer incomplete.
	r, _ = reader(t, 200, `{"status":"success","infos":["PromQL info: metric might not be a counter"],"data":{"resultType":"vector","result":[
	 {"metric":{"namespace":"a","pod":"p1","container":"c"},"value":[1700000000,"1073741824"]}]}}`)
	if s, err := r.Instant(context.Background(), SignalMemory, "q", end); err != nil || len(s) != 1 {
		t.Fatalf("infos only: want one series, got %v, %v", s, err)
	}
}

// Prometheus 2.46 to 2.53 and Thanos Query send PromQL's info annotations among the
// warnings ("PromQL info: …"; Prometheus 2.54 moved them to infos): such an answer is
// complete, as one carrying them in infos is. A latency guardrail's histogram_quantile
// whose buckets needed a monotonicity fix, or a rate over a counter not named *_total,
// then read as a partial answer: the guardrail held shrinking and a breach above the
// objective grew nothing. A PromQL warning, or any other warning beside an info, still
// makes the answer incomplete.
func TestPromQLInfosAmongWarningsAreComplete(t *testing.T) {
	info := `"PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name \"http_request_duration_seconds_bucket\""`
	vec := func(warnings string) string {
		return `{"status":"success","warnings":[` + warnings + `],"data":{"resultType":"vector","result":[
		 {"metric":{"namespace":"a","pod":"p1","container":"c"},"value":[1700000000,"0.75"]}]}}`
	}
	mat := `{"status":"success","warnings":[` + info + `],"data":{"resultType":"matrix","result":[
	 {"metric":{"namespace":"a","pod":"p1","container":"c"},"values":[[1700000000,"0.5"]]}]}}`
	at := time.Unix(1700000000, 0)
	partials := func() float64 { return testutil.ToFloat64(Incomplete.WithLabelValues(IncompletePartialResponse)) }
	before := partials()
	r, _ := reader(t, 200, vec(info))
	if v, err := r.Vector(context.Background(), "q", at); err != nil || len(v) != 1 {
		t.Errorf("Vector with an info among the warnings: %v, %v; want the answer", v, err)
	}
	r, _ = reader(t, 200, mat)
	if s, err := r.Range(context.Background(), SignalCompute, "q", at.Add(-time.Hour), at, time.Minute); err != nil || len(s) != 1 {
		t.Errorf("Range with an info among the warnings: %v, %v; want the answer", s, err)
	}
	if d := partials() - before; d != 0 {
		t.Errorf("incomplete_data{partial_response} += %v, want 0", d)
	}
	for _, w := range []string{
		`"PromQL warning: bucket label \"le\" is missing or has a malformed value of \"x\" for metric name \"m\""`,
		info + `,"No StoreAPIs matched for this query"`,
	} {
		r, _ = reader(t, 200, vec(w))
		if _, err := r.Vector(context.Background(), "q", at); !errors.Is(err, ErrPartialResponse) {
			t.Errorf("warnings [%s]: %v, want ErrPartialResponse", w, err)
		}
	}
}

// An answer of another type than the query asks for (a matrix to an instant query, a
// vector or string to a range query: a proxy or a misrouted request) is an error, no
// data, and is counted as an error, not as an answer read.
func TestWrongResultTypeIsAnError(t *testing.T) {
	errs := func(kind string) float64 { return testutil.ToFloat64(Queries.WithLabelValues(kind, "error")) }
	oks := func(kind string) float64 { return testutil.ToFloat64(Queries.WithLabelValues(kind, "ok")) }
	mat := `{"status":"success","data":{"resultType":"matrix","result":[
	 {"metric":{"namespace":"a","pod":"p1","container":"c"},"values":[[1700000000,"0.5"]]}]}}`
	str := `{"status":"success","data":{"resultType":"string","result":[1700000000,"x"]}}`
	end := time.Unix(1700000000, 0)

	beforeE, beforeOK := errs("instant"), oks("instant")
	r, _ := reader(t, 200, mat)
	if v, err := r.Vector(context.Background(), "q", end); err == nil || v != nil {
		t.Fatalf("Vector of a matrix answer: want an error and no data, got %v, %v", v, err)
	}
	if d := errs("instant") - beforeE; d != 1 {
		t.Errorf("queries{instant,error} += %v, want 1", d)
	}
	if d := oks("instant") - beforeOK; d != 0 {
		t.Errorf("queries{instant,ok} += %v, want 0", d)
	}

	beforeE, beforeOK = errs("range"), oks("range")
	r, _ = reader(t, 200, str)
	if s, err := r.Range(context.Background(), SignalCompute, "q", end.Add(-time.Hour), end, time.Minute); err == nil || s != nil {
		t.Fatalf("Range of a string answer: want an error and no series, got %v, %v", s, err)
	}
	if d := errs("range") - beforeE; d != 1 {
		t.Errorf("queries{range,error} += %v, want 1", d)
	}
	if d := oks("range") - beforeOK; d != 0 {
		t.Errorf("queries{range,ok} += %v, want 0", d)
	}
}
