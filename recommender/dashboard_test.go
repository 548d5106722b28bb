package recommender

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// dashboardQueries returns the queries of the chart's Grafana dashboard panel titled
// title, with its $namespace and $autoscaler variables set to match everything.
func dashboardQueries(t *testing.T, title string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "charts", "gpufrac", "dashboards", "gpufrac.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		if p.Title != title {
			continue
		}
		for _, q := range p.Targets {
			out = append(out, strings.NewReplacer("$namespace", ".*", "$autoscaler", ".*").Replace(q.Expr))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no dashboard panel %q", title)
	}
	return out
}

// The dashboard's sums over the per-autoscaler series leave out the autoscalers that
// lack the figure a sum compares against: an autoscaler without a recommendation yet
// (gpufrac_autoscaler_gpus_held 10, no gpus_needed, no peak) is no saving in 'GPUs
// saved' (sd's 4 held − 1 needed = 3, not 13), and no GPUs held empty in the peak-memory
// utilisation (sd's 60 GiB over 4 × 80 GiB before and 1.5 × 80 GiB after).
func TestDashboardLeavesOutAutoscalersWithoutTheFigure(t *testing.T) {
	s := promtest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	add := func(name, autoscaler string, v float64) {
		l := map[string]string{"__name__": name, "namespace": "ml"}
		if autoscaler != "" {
			l["autoscaler"] = autoscaler
		} else {
			delete(l, "namespace")
		}
		s.Add(t, l, now.Add(-time.Minute), time.Minute, v, v)
	}
	add("gpufrac_autoscaler_gpus_held", "sd", 4)
	add("gpufrac_autoscaler_gpus_needed", "sd", 1)
	add("gpufrac_autoscaler_gpus_allocated", "sd", 1.5)
	add("gpufrac_autoscaler_gpu_memory_peak_bytes", "sd", 60*gib)
	add("gpufrac_autoscaler_gpus_held", "new", 10)
	add("gpufrac_autoscaler_gpus_allocated", "new", 10)
	add("gpufrac_recommender_gpu_memory_bytes", "", 80*gib)
	prom := s.API(t)
	value := func(q string) float64 {
		v, _, _, err := prom.Query(context.Background(), q, now)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		vec, ok := v.(model.Vector)
		if !ok || len(vec) != 1 {
			t.Fatalf("%s: %v, want one sample", q, v)
		}
		return float64(vec[0].Value)
	}
	if got := value(dashboardQueries(t, "GPUs saved")[0]); got != 3 {
		t.Errorf("GPUs saved %v, want 3 (sd's 4 held − 1 needed; 'new' has no recommendation)", got)
	}
	u := dashboardQueries(t, "Peak GPU memory over memory held: before vs after")
	for i, want := range []float64{60.0 / 320, 60.0 / 120} {
		if got := value(u[i]); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, want %v (sd's GPUs only)", u[i], got, want)
		}
	}
}
