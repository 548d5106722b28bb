package recommender

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// isSampleRead matches the compute read from raw samples (metrics.Reader.RangeFromSamples):
// the SM_ACTIVE series selector as a range vector, no function around it, or its read
// through the remote read API.
func isSampleRead(q string) bool {
	for _, m := range []string{metrics.DCGMSMActive, metrics.DCGMFBUsed} {
		if strings.HasPrefix(q, m+"{") && strings.HasSuffix(q, "]") ||
			strings.HasPrefix(q, promtest.RemoteReadPrefix) && strings.Contains(q, `__name__="`+m+`"`) {
			return true
		}
	}
	return false
}

// isMemoryPeakRead matches a read of the memory peaks through the query API.
func isMemoryPeakRead(q string) bool {
	return strings.HasPrefix(q, "label_replace(max by") && strings.Contains(q, "max_over_time("+metrics.DCGMFBUsed)
}

// Issue 17: a history load reads compute and memory peaks from raw samples where one
// field has series and no device holds several pods, and what it writes is what the
// queries write. Two recommenders load the same 30 hours of two pods (varied activity
// and memory; three hours of one pod with every other SM_ACTIVE sample and every other
// FB_USED sample impossible, dropped by both reads): one from
// raw samples, the other with every raw-sample read refused as too large (a backend's
// sample limit; the remote read refused first), so that it falls back to the range
// queries of Source.ComputeQuery. The first reads through the remote read API only.
// Their recommendations are equal, and each read the way it was meant to.
func TestHistoryComputeFromSamples(t *testing.T) {
	var written [2]string
	for i, refuse := range []bool{false, true} {
		objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
		h := newEngineHarness(t, objs, metrics.DCGM{})
		const n = 30 * 120 // 30 hours every 30 s
		for j, p := range podsOf(objs) {
			uuid := "GPU-" + string(rune('a'+j))
			start := h.now.Add(-time.Duration(n-1) * 30 * time.Second)
			mem, cpu := make([]float64, n), make([]float64, n)
			for k := range cpu {
				mem[k] = 20000 + float64((k*7+j)%13)*300
				cpu[k] = 0.05 + 0.6*float64((k*11+3*j)%17)/17
			}
			if j == 1 { // three hours of an exporter writing an impossible value every other sample
				for k := n / 2; k < n/2+360; k += 2 {
					cpu[k] = 1.37
					mem[k+1] = 9223372036854775794 // a DCGM blank sentinel
				}
			}
			h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, uuid), start, 30*time.Second, mem...)
			h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, uuid), start, 30*time.Second, cpu...)
		}
		if refuse {
			h.prom.SetFailureIf(isSampleRead, errors.New("query processing would load too many samples into memory in query execution"))
		}
		if err := h.rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		samples, remote, ranges, peaks := 0, 0, 0, 0
		for _, q := range h.prom.Queries() {
			switch {
			case isSampleRead(q):
				samples++
				if strings.HasPrefix(q, promtest.RemoteReadPrefix) {
					remote++
				}
			case isComputeRead(q):
				ranges++
			case isMemoryPeakRead(q):
				peaks++
			}
		}
		if samples == 0 || (refuse && (ranges == 0 || peaks == 0)) || (!refuse && (remote != samples || ranges != 0 || peaks != 0)) {
			t.Fatalf("refused %v: %d reads from raw samples (%d through the remote read API), %d compute and %d memory queries; want raw-sample reads (all remote reads when not refused), and queries after a refusal",
				refuse, samples, remote, ranges, peaks)
		}
		st := h.gfr(t, "ml", "sd").Status
		if len(st.ContainerRecommendations) != 1 {
			t.Fatalf("refused %v: no recommendation: %+v", refuse, st.Conditions)
		}
		written[i] = bounds(st.ContainerRecommendations)
	}
	if written[0] != written[1] {
		t.Fatalf("the load from raw samples wrote\n%s\nthe range queries\n%s", written[0], written[1])
	}
}
