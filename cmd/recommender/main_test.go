package main

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap/bootstraptest"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(flag.NewFlagSet("recommender", flag.ContinueOnError), nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.src != nil || o.cfg.Policy.GPUMemoryBytes != 80<<30 || o.cfg.Policy.MinMemoryBytes != 0 || o.cfg.Policy.FitMemoryHeadroomBytes != 2<<30 ||
		o.electionID != leaderElectID || !o.planner || o.planInterval != time.Minute || o.labels != metrics.DefaultLabels ||
		o.mgr.MetricsAddr != ":8080" || !o.mgr.LeaderElect || !o.cfg.Checkpoints || o.cfg.CheckpointInterval != 30*time.Minute ||
		o.cfg.HistorySliceSamples != 1_000_000 || o.cfg.HistorySliceAlignment != 2*time.Hour {
		t.Errorf("defaults %+v", o)
	}
	o, err = parseFlags(flag.NewFlagSet("recommender", flag.ContinueOnError), []string{
		"--metric-source", "dcgm", "--gpu-memory", "40Gi", "--min-memory", "1Gi", "--fit-memory-headroom", "0",
		"--recommender-name", "team-a", "--shard-namespace-selector", "team=a", "--pod-label", "exported_pod", "--checkpoints=false",
		"--history-slice-samples", "200000", "--history-slice-alignment", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if o.src == nil || o.src.Name() != "dcgm" || o.cfg.Policy.GPUMemoryBytes != 40<<30 || o.cfg.Policy.MinMemoryBytes != 1<<30 ||
		o.cfg.Policy.FitMemoryHeadroomBytes != -1 || o.electionID != leaderElectID+"-team-a" || o.labels.Pod != "exported_pod" ||
		o.cfg.Shard.Namespaces == nil || o.cfg.Shard.Namespaces.String() != "team=a" || o.cfg.Checkpoints ||
		o.cfg.HistorySliceSamples != 200000 || o.cfg.HistorySliceAlignment != -1 {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range []struct{ args, wantErr string }{
		{"--gpu-memory 0", "--gpu-memory"},
		{"--gpu-memory lots", "--gpu-memory"},
		{"--min-memory -1Gi", "--min-memory"},
		{"--fit-memory-headroom x", "--fit-memory-headroom"},
		{"--recommender-name Team_A", "--recommender-name"},
		{"--shard-namespace-selector team=(a", "--shard-namespace-selector"},
		{"--metric-source nvml", `--metric-source: unknown metric source "nvml"`},
		// A value the chart's schema offered, a typo: not auto in their place.
		{"--label-mode exported", `--label-mode "exported"`},
		{"--label-mode Direct", `--label-mode "Direct"`},
		// Not a label name: every query would fail to parse, every cycle.
		{"--namespace-label exported-namespace", `--namespace-label "exported-namespace"`},
		{"--pod-label=", `--pod-label ""`},
		{"--checkpoint-writes-per-cycle -1", "--checkpoint-writes-per-cycle"},
		{"--history-slice-samples 0", "--history-slice-samples"},
		// Out of range: an error naming the flag, not the default in its place.
		{"--interval 0s", "--interval "},
		{"--interval -1m", "--interval "},
		{"--history-length -1h", "--history-length "},
		{"--checkpoint-interval 0s", "--checkpoint-interval "},
		{"--prometheus-timeout 0s", "--prometheus-timeout "},
		{"--sharing-plan-interval 0s", "--sharing-plan-interval "},
		{"--max-backoff -1m", "--max-backoff "},
		{"--max-samples-per-query -5", "--max-samples-per-query "},
		{"--guardrail-compute-step -0.1", "--guardrail-compute-step "},
	} {
		_, err := parseFlags(flag.NewFlagSet("recommender", flag.ContinueOnError), strings.Fields(bad.args))
		if err == nil || !strings.Contains(err.Error(), bad.wantErr) {
			t.Errorf("%s: error %v, want one naming %s", bad.args, err, bad.wantErr)
		}
	}
}

// TestBadFlagIsBrief: a bad flag prints its error and a one-line --help hint, not the
// ~150 lines of every flag's usage; -h prints them.
func TestBadFlagIsBrief(t *testing.T) {
	bootstraptest.BadFlagIsBrief(t, "recommender", func(fs *flag.FlagSet, args []string) error {
		_, err := parseFlags(fs, args)
		return err
	})
}
