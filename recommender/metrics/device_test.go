package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Kind 13 (issue 13): every spelling of the device label (UUID, gpu_uuid, device_uuid,
// deviceuuid) feeds shared-device detection: two pods that carry the same memory value
// on one device at the same times are marked as copies, whatever the spelling, and
// pods on different devices are not — here with a reader whose own device labels
// (those of another source) name none of the spellings but UUID.
func TestEverySpellingFeedsSharedDetection(t *testing.T) {
	ctx := context.Background()
	for _, label := range DeviceUUIDLabels {
		t.Run(label, func(t *testing.T) {
			prom := promtest.New(t)
			r := &Reader{API: prom.API(t), Labels: DefaultLabels, Device: []string{"UUID", MIGInstanceLabel}}
			series := func(pod, dev string) map[string]string {
				return map[string]string{"__name__": "gpu_memory_test_bytes", "namespace": "ml", "pod": pod, label: dev}
			}
			start := t0.Add(30 * time.Second)
			prom.Add(t, series("a", "GPU-1"), start, 30*time.Second, promtest.Repeat(15866*MiB, 10)...)
			prom.Add(t, series("b", "GPU-1"), start, 30*time.Second, promtest.Repeat(15866*MiB, 10)...)
			prom.Add(t, series("c", "GPU-2"), start, 30*time.Second, promtest.Repeat(15866*MiB, 10)...)
			got, err := r.Range(ctx, SignalMemory, `gpu_memory_test_bytes`, start, start.Add(4*time.Minute), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			shared := map[string]int{}
			for _, s := range got {
				shared[s.ID.Pod] = s.SharedSamples
			}
			if shared["a"] != 9 || shared["b"] != 9 {
				t.Errorf("%s: shared samples a=%d b=%d, want 9 each (one device value copied to two pods)", label, shared["a"], shared["b"])
			}
			if shared["c"] != 0 {
				t.Errorf("%s: pod c alone on GPU-2 marked shared (%d)", label, shared["c"])
			}
		})
	}
}
