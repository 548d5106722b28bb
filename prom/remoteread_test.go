package prom

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/api"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

func remoteAPI(t *testing.T, url string) queryAPI {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	return NewAPI(c, nil).(queryAPI)
}

// ReadRaw returns what the query API returns for the range vector selector[to − from]
// at to: the same series, each once (a series of 1,000 samples arrives in 9 chunks, one
// frame each, and is one stream), the same samples in (from, to] (a sample at from is
// out, one at to in; NaN kept as NaN), none of the unselected series.
func TestReadRawAsRangeVector(t *testing.T) {
	srv := promtest.New(t)
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	vals := func(n int, base float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = base + float64(i%17)
		}
		out[n/2] = math.NaN()
		return out
	}
	srv.Add(t, map[string]string{"__name__": "util", "namespace": "a", "pod": "p-0"}, t0, 15*time.Second, vals(1000, 0)...)
	srv.Add(t, map[string]string{"__name__": "util", "namespace": "a", "pod": "p-1"}, t0.Add(time.Hour), 15*time.Second, vals(200, 50)...)
	srv.Add(t, map[string]string{"__name__": "util", "namespace": "b", "pod": "p-2"}, t0, 15*time.Second, vals(1000, 7)...)
	srv.Add(t, map[string]string{"__name__": "other", "namespace": "a", "pod": "p-0"}, t0, 15*time.Second, vals(1000, 9)...)
	from, to := t0.Add(30*time.Minute), t0.Add(3*time.Hour+30*time.Minute) // both on a sample
	sel := `util{namespace=~"a|c",pod!=""}`

	a := remoteAPI(t, srv.URL)
	got, err := a.ReadRaw(context.Background(), sel, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if q := srv.Queries(); len(q) != 1 || q[0] != promtest.RemoteReadPrefix+`{namespace=~"a|c",pod!="",__name__="util"}` {
		t.Fatalf("queries %q, want one remote read", q)
	}
	v, _, _, err := a.Query(context.Background(), sel+"[3h]", to)
	if err != nil {
		t.Fatal(err)
	}
	want := v.(model.Matrix)
	if len(got) != 2 || len(want) != 2 {
		t.Fatalf("%d series read raw, %d from the query API; want 2 each", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		delete(w.Metric, model.MetricNameLabel) // a range vector's selector keeps the name; compare the rest
		delete(g.Metric, model.MetricNameLabel)
		if !g.Metric.Equal(w.Metric) || len(g.Values) != len(w.Values) {
			t.Fatalf("series %d: raw %s with %d samples, query API %s with %d", i, g.Metric, len(g.Values), w.Metric, len(w.Values))
		}
		for j, p := range w.Values {
			q := g.Values[j]
			if q.Timestamp != p.Timestamp || !(q.Value == p.Value || math.IsNaN(float64(q.Value)) && math.IsNaN(float64(p.Value))) {
				t.Fatalf("%s sample %d: raw %v, query API %v", w.Metric, j, q, p)
			}
		}
		if first := g.Values[0].Timestamp.Time(); !first.After(from) {
			t.Errorf("%s: first sample at %s, want after %s", g.Metric, first, from)
		}
	}
	if last := got[0].Values[len(got[0].Values)-1].Timestamp.Time(); !last.Equal(to) {
		t.Errorf("last sample of p-0 at %s, want the one at %s", last, to)
	}
}

// A backend without the remote read API (404), or a proxy that forbids it (403), is
// asked once: ReadRaw then answers
// ErrRemoteReadUnsupported without a request. A refusal (503) is an error that says
// so, not ErrRemoteReadUnsupported, and the next call asks again.
func TestReadRawUnsupportedAndRefused(t *testing.T) {
	srv := promtest.New(t)
	srv.SetFailure(errors.New("too many remote reads"))
	a := remoteAPI(t, srv.URL)
	ctx := context.Background()
	for range 2 {
		_, err := a.ReadRaw(ctx, `util{pod!=""}`, time.Unix(0, 0), time.Unix(3600, 0))
		if err == nil || errors.Is(err, ErrRemoteReadUnsupported) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "too many remote reads") {
			t.Fatalf("refused read: error %v, want the 503 and its message", err)
		}
	}
	if _, err := a.ReadRaw(ctx, `util{pod!=`, time.Unix(0, 0), time.Unix(3600, 0)); err == nil || errors.Is(err, ErrRemoteReadUnsupported) {
		t.Errorf("bad selector: error %v, want the parse error", err)
	}
	srv.SetFailure(nil)
	srv.SetRemoteRead(false)
	for range 3 {
		if _, err := a.ReadRaw(ctx, `util{pod!=""}`, time.Unix(0, 0), time.Unix(3600, 0)); !errors.Is(err, ErrRemoteReadUnsupported) {
			t.Fatalf("backend without remote read: error %v, want ErrRemoteReadUnsupported", err)
		}
	}
	if n := len(srv.Queries()); n != 3 {
		t.Errorf("%d requests, want 2 refused and 1 answered 404", n)
	}
	// A proxy in front of Prometheus that forbids the path (403) is asked once too.
	asked := 0
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked++
		http.Error(w, "forbidden", http.StatusForbidden)
	}))
	defer proxy.Close()
	b := remoteAPI(t, proxy.URL)
	for range 2 {
		if _, err := b.ReadRaw(ctx, `util{pod!=""}`, time.Unix(0, 0), time.Unix(3600, 0)); !errors.Is(err, ErrRemoteReadUnsupported) {
			t.Fatalf("forbidden: error %v, want ErrRemoteReadUnsupported", err)
		}
	}
	if asked != 1 {
		t.Errorf("forbidding proxy asked %d times, want once", asked)
	}
}

// A frame whose checksum does not match, or that is cut short, fails the read; the
// whole-sample answer of an older server (SAMPLES) is read, its samples put in time
// order with one per timestamp.
func TestReadRawFrames(t *testing.T) {
	frame := func(corrupt bool) []byte {
		c := prompb.ChunkedReadResponse{ChunkedSeries: []*prompb.ChunkedSeries{{Labels: []prompb.Label{{Name: "pod", Value: "p"}}}}}
		b, err := proto.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		var head [binary.MaxVarintLen64]byte
		buf.Write(head[:binary.PutUvarint(head[:], uint64(len(b)))])
		sum := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		if corrupt {
			sum++
		}
		_ = binary.Write(&buf, binary.BigEndian, sum)
		buf.Write(b)
		return buf.Bytes()
	}
	sampled := func() []byte {
		b, err := proto.Marshal(&prompb.ReadResponse{Results: []*prompb.QueryResult{{Timeseries: []*prompb.TimeSeries{{
			Labels:  []prompb.Label{{Name: "pod", Value: "p"}},
			Samples: []prompb.Sample{{Timestamp: 3000, Value: 3}, {Timestamp: 1000, Value: 1}, {Timestamp: 3000, Value: 4}, {Timestamp: 2000, Value: 2}},
		}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return snappy.Encode(nil, b)
	}
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		err               string // "" for none
		want              []model.SamplePair
	}{
		{"corrupt", "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse", frame(true), "checksum", nil},
		{"cut short", "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse", frame(false)[:5], "unexpected EOF", nil},
		{"not remote read", "text/html", []byte("<html>"), "content type", nil},
		{"samples", "application/x-protobuf", sampled(), "", []model.SamplePair{{Timestamp: 1000, Value: 1}, {Timestamp: 2000, Value: 2}, {Timestamp: 3000, Value: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = w.Write(tc.body)
			}))
			defer srv.Close()
			m, err := remoteAPI(t, srv.URL).ReadRaw(context.Background(), `util{pod="p"}`, time.Unix(0, 0), time.Unix(10, 0))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != 1 || len(m[0].Values) != len(tc.want) {
				t.Fatalf("read %v, want one series of %v", m, tc.want)
			}
			for i, p := range tc.want {
				if !m[0].Values[i].Equal(&p) {
					t.Fatalf("read %v, want %v", m[0].Values, tc.want)
				}
			}
		})
	}
}

// --prometheus-remote-read=false: the API built from the flags never asks the remote
// read endpoint; true (the default) does, with the query API's headers.
func TestRemoteReadFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv := promtest.New(t)
		var header string
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			header = r.Header.Get("X-Scope-OrgID")
			srv.ServeHTTP(w, r)
		})
		hs := httptest.NewServer(h)
		defer hs.Close()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var c Config
		c.AddFlags(fs)
		if err := fs.Parse([]string{"--prometheus-url=" + hs.URL, "--prometheus-header=X-Scope-OrgID=team-a", "--prometheus-remote-read=" + strconv.FormatBool(on)}); err != nil {
			t.Fatal(err)
		}
		a, err := c.API()
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.(interface {
			ReadRaw(context.Context, string, time.Time, time.Time) (model.Matrix, error)
		}).ReadRaw(context.Background(), `util{pod!=""}`, time.Unix(0, 0), time.Unix(60, 0))
		if asked := len(srv.Queries()); on != (asked == 1) || on != (err == nil) || !on && !errors.Is(err, ErrRemoteReadUnsupported) {
			t.Errorf("--prometheus-remote-read=%v: %d requests, error %v", on, asked, err)
		}
		if on && header != "team-a" {
			t.Errorf("remote read sent X-Scope-OrgID %q, want the flag's team-a", header)
		}
	}
}
