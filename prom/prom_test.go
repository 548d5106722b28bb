package prom

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// Every query the API client sends asks Thanos-style backends for no partial responses.
func TestQueriesAskForNoPartialResponse(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		got = append(got, r.URL.Path+" "+r.Form.Get(PartialResponseParam)+" "+r.Form.Get("query"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	}))
	defer srv.Close()
	c := Config{URL: srv.URL}
	api, err := c.API()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, _, err := api.Query(context.Background(), "up", now); err != nil {
		t.Fatal(err)
	}
	_, _, _, _ = api.QueryRange(context.Background(), "up", promv1.Range{Start: now.Add(-time.Hour), End: now, Step: time.Minute})
	want := []string{"/api/v1/query false up", "/api/v1/query_range false up"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// TestAPIRefusesURLWithoutScheme: a --prometheus-url that is not an http(s) URL with a
// host (the scheme left off, as in the chart's prometheus.url written as a Service
// address) is an error naming the flag at start; before, prometheus:9090 parsed as the
// scheme "prometheus" and every cycle's queries failed.
func TestAPIRefusesURLWithoutScheme(t *testing.T) {
	for _, u := range []string{"prometheus:9090", "localhost:9090", "prometheus-operated.monitoring.svc:9090", "ftp://prometheus:9090", "http://", "http://[::1"} {
		c := Config{URL: u}
		if _, err := c.API(); err == nil || !strings.HasPrefix(err.Error(), "--prometheus-url "+strconv.Quote(u)) {
			t.Errorf("%q: %v, want an error naming --prometheus-url and the value", u, err)
		}
	}
	for _, u := range []string{"http://prometheus:9090", "https://thanos.example.com/prometheus", "http://127.0.0.1:9090"} {
		c := Config{URL: u}
		if _, err := c.API(); err != nil {
			t.Errorf("%q: %v", u, err)
		}
	}
}
