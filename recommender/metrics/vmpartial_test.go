package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/prom"
)

// VictoriaMetrics' cluster vmselect answers without a vmstorage node as a success with
// "isPartial": true and no warning (unless asked with deny_partial_response=1). Through
// the client every component builds (prom.Config.API), such an answer is incomplete like
// a Thanos answer with warnings: Vector, Range and DetectSources return
// ErrPartialResponse and no data (before: the answer, one pod short, was decided from).
// "isPartial": false is a complete answer, and every request asks for no partial answer.
func TestVictoriaMetricsPartialAnswersAreIncomplete(t *testing.T) {
	var mu sync.Mutex
	partial, deny := true, map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		deny[r.URL.Path] = r.Form.Get(prom.DenyPartialResponseParam)
		flag := "false"
		if partial {
			flag = "true"
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/query":
			_, _ = w.Write([]byte(`{"status":"success","isPartial":` + flag + `,"data":{"resultType":"vector","result":[
			 {"metric":{"namespace":"a","pod":"p1","container":"c"},"value":[1700000000,"0.04"]}]}}`))
		case r.URL.Path == "/api/v1/query_range":
			_, _ = w.Write([]byte(`{"status":"success","isPartial":` + flag + `,"data":{"resultType":"matrix","result":[
			 {"metric":{"namespace":"a","pod":"p1","container":"c"},"values":[[1700000000,"0.04"]]}]}}`))
		case strings.HasPrefix(r.URL.Path, "/api/v1/label/"):
			_, _ = w.Write([]byte(`{"status":"success","isPartial":` + flag + `,"data":["DCGM_FI_DEV_FB_USED"]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := prom.Config{URL: srv.URL}
	api, err := cfg.API()
	if err != nil {
		t.Fatal(err)
	}
	r := &Reader{API: api, Labels: DefaultLabels}
	ctx, at := context.Background(), time.Unix(1700000000, 0)
	check := func(what string, err error, got any) {
		t.Helper()
		if !errors.Is(err, ErrPartialResponse) || !strings.Contains(err.Error(), "isPartial") {
			t.Errorf("%s of an isPartial answer: %v, %v; want ErrPartialResponse", what, got, err)
		}
	}
	v, err := r.Vector(ctx, "q", at)
	check("Vector", err, v)
	s, err := r.Range(ctx, SignalCompute, "q", at.Add(-time.Minute), at, time.Minute)
	check("Range", err, s)
	src, err := DetectSources(ctx, r, at.Add(-time.Hour), at)
	check("DetectSources", err, src)
	mu.Lock()
	for _, p := range []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/label/__name__/values"} {
		if deny[p] != "1" {
			t.Errorf("%s sent %s=%q, want 1", p, prom.DenyPartialResponseParam, deny[p])
		}
	}
	partial = false
	mu.Unlock()
	if v, err := r.Vector(ctx, "q", at); err != nil || len(v) != 1 {
		t.Errorf("Vector of a complete answer: %v, %v", v, err)
	}
	if s, err := r.Range(ctx, SignalCompute, "q", at.Add(-time.Minute), at, time.Minute); err != nil || len(s) != 1 {
		t.Errorf("Range of a complete answer: %v, %v", s, err)
	}
	if src, err := DetectSources(ctx, r, at.Add(-time.Hour), at); err != nil || len(src) != 1 {
		t.Errorf("DetectSources of a complete answer: %v, %v", src, err)
	}
}
