package prom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// answers are Prometheus API answers: status code, content type and body.
var answers = map[string]struct {
	code int
	body string
}{
	"vector": {200, `{"status":"success","data":{"resultType":"vector","result":[
		{"metric":{"__name__":"DCGM_FI_DEV_FB_USED","namespace":"ml","pod":"sd-0","container":"main","q":"a\"b\\c\u00e9"},"value":[1700000000.123,"1.5"]},
		{"metric":{"pod":"sd-1"},"value":[1700000000,"NaN"]},
		{"metric":{},"value":[1700000000.5,"+Inf"]},
		{"metric":{"pod":"sd-2"},"value":[1700000060.001,"-1e-3"]},
		{"metric":{"le":"h"},"histogram":[1700000000.1,{"count":"2","sum":"3.5","buckets":[[0,"0","1","2"]]}]}]}}`},
	"matrix": {200, `{"status":"success","warnings":["w1"],"infos":["i1","i2"],"data":{"resultType":"matrix","result":[
		{"metric":{"pod":"sd-0","namespace":"ml"},"values":[[1700000000,"1"],[1700000060.25,"2.5"],[1700000120.999,"0"]]},
		{"metric":{"pod":"sd-1"},"values":[]}]}}`},
	"empty":        {200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
	"scalar":       {200, `{"status":"success","data":{"resultType":"scalar","result":[1700000000.75,"42"]}}`},
	"string":       {200, `{"status":"success","data":{"resultType":"string","result":[1700000000,"hello \"x\""]}}`},
	"result-first": {200, `{"data":{"result":[{"metric":{"pod":"p"},"value":[1700000000,"3"]}],"resultType":"vector"},"status":"success"}`},
	"bad-type":     {200, `{"status":"success","data":{"resultType":"blob","result":[]}}`},
	"error-200":    {200, `{"status":"error","errorType":"execution","error":"boom"}`},
	"error-422":    {422, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory","warnings":["w"]}`},
	"error-400":    {400, `{"status":"error"}`},
	"success-400":  {400, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
	"plain-400":    {400, `bad request`},
	"error-503":    {503, `{"status":"error","errorType":"unavailable","error":"overloaded"}`},
	"plain-500":    {500, "internal error\n"},
	"redirect":     {302, ""},
	"no-content":   {204, ""},
	"invalid":      {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"p"},"value":[1700000000,"x"]}]}}`},
	"truncated":    {200, `{"status":"success","data":{"resultType":"vector","result":[`},
}

// server answers each query with the answer named by the query, records each request,
// and refuses POST with 405 for queries starting "get:" (client_golang then retries
// with GET).
type server struct {
	mu   sync.Mutex
	reqs []string
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	q := r.Form.Get("query")
	s.mu.Lock()
	s.reqs = append(s.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Form.Encode())
	s.mu.Unlock()
	if len(q) > 4 && q[:4] == "get:" {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		q = q[4:]
	}
	a, ok := answers[q]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if a.code == 302 {
		w.Header().Set("Location", "/nowhere")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.code)
	_, _ = w.Write([]byte(a.body))
}

func (s *server) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reqs
	s.reqs = nil
	return r
}

// Every answer decodes to what client_golang's api/v1 returns for it: the same value,
// warnings, infos and error (type, message and detail; for a body that is not valid JSON
// the message is the decoder's own), after the same requests (endpoint, URL query,
// form, and the GET fallback), for instant and range queries, through NoPartialResponse.
func TestQueryAsClientGolang(t *testing.T) {
	s := &server{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c = NoPartialResponse(c)
	lib, fast := promv1.NewAPI(c), NewAPI(c, nil)
	ctx := context.Background()
	at := time.Unix(1700000000, 250e6)
	r := promv1.Range{Start: at, End: at.Add(2 * time.Minute), Step: time.Minute}
	for name := range answers {
		for _, query := range []string{name, "get:" + name} {
			for _, kind := range []string{"instant", "range"} {
				run := func(a promv1.API) (model.Value, promv1.Warnings, promv1.Infos, error) {
					if kind == "range" {
						return a.QueryRange(ctx, query, r)
					}
					return a.Query(ctx, query, at)
				}
				wantV, wantW, wantI, wantErr := run(lib)
				wantReqs := s.take()
				gotV, gotW, gotI, gotErr := run(fast)
				gotReqs := s.take()
				what := kind + " " + query
				if !reflect.DeepEqual(gotReqs, wantReqs) {
					t.Errorf("%s: requests\n%q\nwant\n%q", what, gotReqs, wantReqs)
				}
				if g, w := asJSON(t, gotV), asJSON(t, wantV); wantErr == nil && g != w {
					t.Errorf("%s: value\n%s\nwant\n%s", what, g, w)
				}
				if !reflect.DeepEqual(gotW, wantW) || !reflect.DeepEqual(gotI, wantI) {
					t.Errorf("%s: warnings %q infos %q, want %q %q", what, gotW, gotI, wantW, wantI)
				}
				if (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("%s: error %v, want %v", what, gotErr, wantErr)
				}
				if wantErr == nil {
					continue
				}
				var got, want *promv1.Error
				if !errors.As(gotErr, &got) || !errors.As(wantErr, &want) {
					t.Errorf("%s: errors %T %v and %T %v, want both *promv1.Error", what, gotErr, gotErr, wantErr, wantErr)
					continue
				}
				if name == "invalid" || name == "truncated" || name == "no-content" {
					got.Msg, want.Msg = "", "" // the JSON decoders' own words
				}
				if *got != *want {
					t.Errorf("%s: error %#v, want %#v", what, *got, *want)
				}
			}
		}
	}
}

// A query whose answer is cut by its context's deadline (headers and part of the body
// sent, then nothing) fails with the context's error, as through client_golang: the
// reader's timeout retries (metrics.Reader) look for context.DeadlineExceeded.
func TestQueryDeadlineAsClientGolang(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"p"},`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]promv1.API{"client_golang": promv1.NewAPI(c), "NewAPI": NewAPI(c, nil)} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, _, _, err := a.Query(ctx, "q", time.Unix(1700000000, 0))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want the context's deadline", name, err)
		}
	}
}

// asJSON is v as model's own JSON (NaN as "NaN", which reflect.DeepEqual never finds
// equal), with its Go type.
func asJSON(t *testing.T, v model.Value) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%T %s", v, b)
}

// BenchmarkQuery reads an instant answer of 10,000 series (a live minute of 10,000 GPU
// pods, with DCGM's labels) and a range answer of 1,000 series × 60 points, through
// client_golang's api/v1 and through NewAPI, over the same local HTTP server.
func BenchmarkQuery(b *testing.B) {
	var vec, mat strings.Builder
	vec.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
	mat.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	for i := range 10000 {
		if i > 0 {
			vec.WriteByte(',')
		}
		labels := fmt.Sprintf(`{"__name__":"DCGM_FI_DEV_FB_USED","Hostname":"node-%03d","UUID":"GPU-%08x-0000-0000-0000-000000000000","container":"main","device":"nvidia%d","gpu":"%d","instance":"10.0.%d.%d:9400","job":"dcgm-exporter","modelName":"NVIDIA H100 80GB HBM3","namespace":"ns-%02d","pod":"wl-%04d-%d"}`,
			i/8, i, i%8, i%8, i/250, i%250, i%20, i/5, i%5)
		fmt.Fprintf(&vec, `{"metric":%s,"value":[1700000000.123,"%d"]}`, labels, 1000+i)
		if i < 1000 {
			if i > 0 {
				mat.WriteByte(',')
			}
			fmt.Fprintf(&mat, `{"metric":%s,"values":[`, labels)
			for p := range 60 {
				if p > 0 {
					mat.WriteByte(',')
				}
				fmt.Fprintf(&mat, `[%d,"%d.5"]`, 1700000000+60*p, i+p)
			}
			mat.WriteString(`]}`)
		}
	}
	vec.WriteString(`]}}`)
	mat.WriteString(`]}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "query_range") {
			_, _ = io.WriteString(w, mat.String())
			return
		}
		_, _ = io.WriteString(w, vec.String())
	}))
	b.Cleanup(srv.Close)
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	at := time.Unix(1700000000, 0)
	for _, a := range []struct {
		name string
		api  promv1.API
	}{{"client_golang", promv1.NewAPI(c)}, {"one-pass", NewAPI(c, nil)}} {
		b.Run("vector/"+a.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v, _, _, err := a.api.Query(ctx, "q", at); err != nil || len(v.(model.Vector)) != 10000 {
					b.Fatal(err)
				}
			}
		})
		b.Run("matrix/"+a.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v, _, _, err := a.api.QueryRange(ctx, "q", promv1.Range{Start: at, End: at.Add(time.Hour), Step: time.Minute}); err != nil || len(v.(model.Matrix)) != 1000 {
					b.Fatal(err)
				}
			}
		})
	}
}
