package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// BenchmarkDecodeSharedDevices decodes a day of per-minute compute samples (a history
// load's slice) of 1,000 pods, two per GPU, each given its device's value as
// dcgm-exporter does without per-pod attribution: the copies are found, split, and (with
// the contention evidence) marked as taken on a shared GPU, saturated or not.
func BenchmarkDecodeSharedDevices(b *testing.B) {
	const pods, samples = 1000, 1440
	start := model.TimeFromUnix(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	var m model.Matrix
	for p := range pods {
		s := &model.SampleStream{Metric: model.Metric{"namespace": "ns", "pod": model.LabelValue(fmt.Sprintf("p-%d", p)),
			"container": "main", "UUID": model.LabelValue(fmt.Sprintf("GPU-%d", p/2)), SourceLabel: DCGMGREngineActive}}
		for i := range samples {
			v := 0.3
			if i%50 == 0 {
				v = 0.97
			}
			s.Values = append(s.Values, model.SamplePair{Timestamp: start.Add(time.Duration(i) * time.Minute), Value: model.SampleValue(v)})
		}
		m = append(m, s)
	}
	r := &Reader{Labels: DefaultLabels, Device: []string{"UUID", MIGInstanceLabel}}
	b.ReportAllocs()
	for b.Loop() {
		if out := r.decode(SignalCompute, m, nil, time.Minute); len(out) != pods {
			b.Fatalf("%d series", len(out))
		}
	}
}
