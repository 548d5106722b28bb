package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/agent"
	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap/bootstraptest"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(flag.NewFlagSet("agent", flag.ContinueOnError), []string{
		"--simulate", "--trace", "t.csv", "--simulate-gpu-memory", "40Gi", "--simulate-speed", "60", "--node-name", "n1", "--interval", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.sim.GPUMemoryBytes != 40<<30 || o.sim.Speed != 60 || o.cfg.Mode != agent.ModeSimulate || o.sim.Seed != "n1" || o.cfg.Interval != 2*time.Second || !o.sim.Loop {
		t.Errorf("options = %+v", o)
	}
	o, err = parseFlags(flag.NewFlagSet("agent", flag.ContinueOnError), nil)
	if err != nil || o.procRoot != "/proc" || !o.cfg.NVMLRequired || o.listen != ":9410" || o.cfg.Interval != agent.DefaultInterval {
		t.Errorf("defaults = %+v, %v", o, err)
	}
	for in, want := range map[string]uint64{"81559Mi": 81559 << 20, "80GiB": 80 << 30, "0.5Ti": 512 << 30, "85899345920": 80 << 30} {
		o, err := parseFlags(flag.NewFlagSet("agent", flag.ContinueOnError), []string{"--simulate", "--trace", "t.csv", "--simulate-gpu-memory", in})
		if err != nil || o.sim.GPUMemoryBytes != want {
			t.Errorf("--simulate-gpu-memory %s: %+v, %v; want %d bytes", in, o, err, want)
		}
	}
	for _, bad := range [][]string{
		{"--simulate"},
		{"--trace", "t.csv"},
		{"--interval", "500ms"},
		{"--simulate", "--trace", "t.csv", "--simulate-gpu-memory", "lots"},
		{"--simulate", "--trace", "t.csv", "--simulate-gpu-memory", "80G"},  // decimal: 74.5 GiB, refused as by every --gpu-memory
		{"--simulate", "--trace", "t.csv", "--simulate-gpu-memory", "80GB"}, // the same
		{"--simulate", "--trace", "t.csv", "--simulate-gpu-memory", "80"},   // a unit left off: 80 bytes
		{"--simulate", "--trace", "t.csv", "--simulate-speed", "0"},
		{"extra"},
	} {
		if _, err := parseFlags(flag.NewFlagSet("agent", flag.ContinueOnError), bad); err == nil {
			t.Errorf("%s accepted", strings.Join(bad, " "))
		}
	}
	// Out of range: an error naming the flag, not the default or 0 in its place.
	for _, bad := range []string{"--nvml-retry-interval=0s", "--nvml-retry-interval=-30s", "--pod-sync-timeout=-1s",
		"--simulate-gpus=0", "--simulate-offset=-1h", "--simulate-hold=-1m"} {
		name, _, _ := strings.Cut(bad, "=")
		_, err := parseFlags(flag.NewFlagSet("agent", flag.ContinueOnError), []string{"--simulate", "--trace", "t.csv", bad})
		if err == nil || !strings.Contains(err.Error(), name+" ") {
			t.Errorf("%s: error %v, want one naming %s", bad, err, name)
		}
	}
}

// TestBadFlagIsBrief: a bad flag prints its error and a one-line --help hint, not the
// ~150 lines of every flag's usage; -h prints them.
func TestBadFlagIsBrief(t *testing.T) {
	bootstraptest.BadFlagIsBrief(t, "agent", func(fs *flag.FlagSet, args []string) error {
		_, err := parseFlags(fs, args)
		return err
	})
}

// TestTraceErrorsNameTheFlag: a --trace that does not exist, is a directory or does not
// read as a long CSV is an error naming --trace; before, 'open F: no such file or
// directory' or 'F:2: timestamp ...' said nothing of which flag gave F.
func TestTraceErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ms.csv")
	if err := os.WriteFile(bad, []byte("timestamp,namespace,pod,container,memory_bytes,compute_ratio\n1796315293000,ns,p-1,c,1,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "nope.csv"), dir, bad} {
		_, _, err := newGPUs(&options{simulate: true, tracePath: path}, nil, prometheus.NewRegistry())
		if err == nil || !strings.HasPrefix(err.Error(), "--trace: ") || !strings.Contains(err.Error(), path) {
			t.Errorf("--trace %s: %v, want an error naming --trace and the file", path, err)
		}
	}
}
