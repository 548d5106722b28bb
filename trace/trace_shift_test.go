package trace

import (
	"testing"
	"time"
)

// A shift longer than a time.Duration (292 years) lands where asked: before, it
// saturated and a trace moved to end in 9999 ended in 2319.
func TestShiftToEndBeyondADuration(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := Trace{Pods: []Pod{{Memory: []Point{{T: t0, V: 1}, {T: t0.Add(time.Minute), V: 2}}}}}
	end := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.ShiftToEnd(end)
	if got := tr.Pods[0].Memory; !got[1].T.Equal(end) || !got[0].T.Equal(end.Add(-time.Minute)) {
		t.Errorf("shifted to %s, %s; want %s, %s", got[0].T, got[1].T, end.Add(-time.Minute), end)
	}
}
