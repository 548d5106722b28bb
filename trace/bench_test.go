package trace

import (
	"io"
	"testing"
)

// BenchmarkImportGenTD26 reads the whole GenTD26 trace and writes it as
// OpenMetrics to io.Discard (skipped without the shared data).
func BenchmarkImportGenTD26(b *testing.B) {
	dir := sharedData(b, "gentd26")
	b.ReportAllocs()
	for b.Loop() {
		tr, _, err := ReadGenTD26(dir, GenTD26Options{End: testEnd})
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteOpenMetrics(io.Discard, tr, OpenMetricsOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSynthesize generates 100 workloads over one day at one-minute steps.
func BenchmarkSynthesize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Synthesize(SynthOptions{Workloads: 100, Seed: 1, End: testEnd})
	}
}
