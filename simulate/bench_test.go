package simulate

import (
	"os"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/trace"
)

// genTD26Dir is the shared GenTD26 folder, relative to this package.
const genTD26Dir = "../../shared/data/gentd26"

// BenchmarkReplayGenTD26 replays the whole GenTD26 development subset (90 pods, 22.8 h,
// 1369 one-minute steps) through every default policy, once per GPU size. Reading the
// trace is not timed. It is skipped when the shared data folder is absent.
func BenchmarkReplayGenTD26(b *testing.B) {
	if _, err := os.Stat(genTD26Dir); err != nil {
		b.Skipf("GenTD26 data not found: %v", err)
	}
	tr, _, err := trace.ReadGenTD26(genTD26Dir, trace.GenTD26Options{End: time.Unix(1662940800, 0)})
	if err != nil {
		b.Fatal(err)
	}
	benchReplay(b, &tr)
}

// BenchmarkReplaySynthetic replays a synthetic trace of the same scale (90 single-pod
// workloads, 24 h at one sample per minute), so the figure exists without the data.
func BenchmarkReplaySynthetic(b *testing.B) {
	tr := trace.Synthesize(trace.SynthOptions{Workloads: 90, Duration: 24 * time.Hour, Seed: 1, End: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)})
	benchReplay(b, &tr)
}

func benchReplay(b *testing.B, tr *trace.Trace) {
	for _, size := range []int64{48 * gib, 80 * gib, 141 * gib} {
		b.Run(GiB(size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(tr, Options{GPUMemoryBytes: size}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
