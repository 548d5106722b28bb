package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Issue 17: SharedDevices answers from Prometheus' index (the series API) whether a
// device had two or more pods in the window, in any namespace and either label form
// (honor_labels on or off), and never reads a sample.
func TestSharedDevicesFromSeriesIndex(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	from := end.Add(-2 * time.Hour)
	type series struct {
		labels map[string]string
		start  time.Time // 30 samples a minute apart from here
	}
	direct := func(ns, pod, uuid string) map[string]string {
		return map[string]string{"__name__": DCGMSMActive, "namespace": ns, "pod": pod, "container": "main", "UUID": uuid}
	}
	exported := func(ns, pod, uuid string) map[string]string {
		return map[string]string{"__name__": DCGMFBUsed, "namespace": "gpu-operator", "pod": "dcgm-exporter-x",
			"exported_namespace": ns, "exported_pod": pod, "exported_container": "main", "UUID": uuid}
	}
	recent := end.Add(-time.Hour)
	for _, tc := range []struct {
		name   string
		series []series
		want   bool
	}{
		{"one pod per device", []series{{direct("ml", "a", "GPU-1"), recent}, {direct("team-b", "b", "GPU-2"), recent}}, false},
		{"two pods on one device, other namespaces", []series{{direct("ml", "a", "GPU-1"), recent}, {direct("team-b", "b", "GPU-1"), recent}}, true},
		{"one pod, two fields", []series{{direct("ml", "a", "GPU-1"), recent}, {exported("ml", "a", "GPU-1"), recent}}, false},
		// Scraped without honor_labels: every series names the exporter's pod; the pods
		// are the exported ones.
		{"exported, one pod per device", []series{{exported("ml", "a", "GPU-1"), recent}, {exported("ml", "b", "GPU-2"), recent}}, false},
		{"exported, two pods on one device", []series{{exported("ml", "a", "GPU-1"), recent}, {exported("ml", "b", "GPU-1"), recent}}, true},
		// The device's earlier pod ended hours before the window: its chunks end there.
		{"pods one after the other", []series{{direct("ml", "old", "GPU-1"), from.Add(-5 * time.Hour)}, {direct("ml", "a", "GPU-1"), recent}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := promtest.New(t)
			for _, sr := range tc.series {
				s.Add(t, sr.labels, sr.start, time.Minute, promtest.Repeat(0.5, 30)...)
			}
			r := &Reader{API: s.API(t), Labels: DefaultLabels}
			sel := Selector{Labels: DefaultLabels, Namespaces: []string{"ml"}, Device: DCGM{}.DeviceLabels()}
			got, err := r.SharedDevices(context.Background(), DCGM{}, sel, from, end)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("SharedDevices = %v, want %v", got, tc.want)
			}
			for _, q := range s.Queries() {
				if !strings.HasPrefix(q, promtest.SeriesPrefix) {
					t.Errorf("SharedDevices sent a query, not a series request: %s", q)
				}
			}
			if n := len(s.Queries()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

// A failed series request is an error (the caller then looks for copies), and a
// selector without device labels is shared without asking.
func TestSharedDevicesFailureAndNoDevice(t *testing.T) {
	s := promtest.New(t)
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := &Reader{API: s.API(t), Labels: DefaultLabels}
	sel := Selector{Labels: DefaultLabels, Namespaces: []string{"ml"}}
	if got, err := r.SharedDevices(context.Background(), DCGM{}, sel, end.Add(-time.Hour), end); err != nil || !got {
		t.Errorf("no device labels: %v, %v; want true without asking", got, err)
	}
	if n := len(s.Queries()); n != 0 {
		t.Errorf("%d requests without device labels, want 0", n)
	}
	s.SetFailure(errors.New("store down"))
	sel.Device = DCGM{}.DeviceLabels()
	if _, err := r.SharedDevices(context.Background(), DCGM{}, sel, end.Add(-time.Hour), end); err == nil {
		t.Error("a failed series request: no error")
	}
}
