package main

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/gpufrac/gpufrac/trace"
)

// readDB returns every sample of a TSDB directory by series (labels as text), then
// timestamp (ms).
func readDB(t *testing.T, dir string) map[string]map[int64]float64 {
	t.Helper()
	ctx := context.Background()
	// A read-only DB reads the WAL too; backfilled directories have none.
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := tsdb.OpenDBReadOnly(dir, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	out := map[string]map[int64]float64{}
	ss := q.Select(ctx, false, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
	for ss.Next() {
		s := ss.At()
		m := map[int64]float64{}
		it := s.Iterator(nil)
		for it.Next() != 0 {
			ts, v := it.At()
			m[ts] = v
		}
		out[s.Labels().String()] = m
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBlockMatchesPromtool checks that the block the bench writes holds exactly what
// promtool backfills from the OpenMetrics text of the same trace (the demo's path):
// same series (labels), same timestamps and values.
func TestBlockMatchesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	tr := trace.Synthesize(trace.SynthOptions{Workloads: 3, PodsPerWorkload: 2, Duration: 3 * time.Hour,
		Seed: 7, End: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Namespace: "bench-00", WorkloadPrefix: "w00"})
	dir := t.TempDir()
	var om bytes.Buffer
	if err := trace.WriteOpenMetrics(&om, tr, trace.OpenMetricsOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.om"), om.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", filepath.Join(dir, "in.om"), filepath.Join(dir, "promtool")).CombinedOutput(); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	want := readDB(t, filepath.Join(dir, "promtool"))

	ctx := context.Background()
	// A day of blocks holds this trace in one; hour-long blocks split it in four.
	for _, span := range []time.Duration{24 * time.Hour, time.Hour} {
		t.Run(span.String(), func(t *testing.T) {
			compareBlocks(t, ctx, tr, want, filepath.Join(dir, "bench-"+span.String()), span)
		})
	}
}

// traceBounds returns the first and last time of tr's samples.
func traceBounds(tr trace.Trace) (from, to time.Time) {
	for _, p := range tr.Pods {
		for _, pts := range [][]trace.Point{p.Memory, p.Compute} {
			for _, pt := range pts {
				if from.IsZero() || pt.T.Before(from) {
					from = pt.T
				}
				if pt.T.After(to) {
					to = pt.T
				}
			}
		}
	}
	return from, to
}

// compareBlocks writes tr into blocks of span in dir (eachBlock) and compares them with
// want, what promtool backfilled.
func compareBlocks(t *testing.T, ctx context.Context, tr trace.Trace, want map[string]map[int64]float64, dir string, span time.Duration) {
	from, to := traceBounds(tr)
	series, samples, blocks := 0, 0, 0
	err := eachBlock(ctx, dir, from, to, span, func(bw *blockWriter, _ bool) error {
		err := bw.add(ctx, tr, trace.OpenMetricsOptions{})
		series, samples, blocks = max(series, bw.Series), samples+bw.Samples, blocks+1
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if wantBlocks := int((to.Sub(from) + span) / span); blocks != wantBlocks {
		t.Errorf("%d blocks written, want %d", blocks, wantBlocks)
	}
	got := readDB(t, dir)

	if len(want) == 0 || len(got) != len(want) || series != len(want) {
		t.Fatalf("blocks hold %d series (writer counted %d), promtool's %d", len(got), series, len(want))
	}
	n := 0
	for l, ws := range want {
		gs, ok := got[l]
		if !ok {
			t.Errorf("series %s missing from the block", l)
			continue
		}
		if len(gs) != len(ws) {
			t.Errorf("series %s: %d samples in the block, %d in promtool's", l, len(gs), len(ws))
		}
		for ts, v := range ws {
			if gv, ok := gs[ts]; !ok || gv != v {
				t.Errorf("series %s at %d: block %v (present %v), promtool %v", l, ts, gv, ok, v)
				break
			}
		}
		n += len(ws)
	}
	if samples != n {
		t.Errorf("writers counted %d samples, promtool's block has %d", samples, n)
	}
}
