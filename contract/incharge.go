package contract

import (
	"fmt"
	"sort"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Precedes reports whether autoscaler a takes precedence over b when both target the
// same workload: the one created first (metadata.creationTimestamp, which the API
// server sets at one-second resolution) wins, and among autoscalers created in the same
// second the one whose name sorts first. An autoscaler being deleted never takes
// precedence over one that is not. The order is total, so the recommender, the
// webhook and the updater all pick the same winner without talking to each other.
func Precedes(a, b *gpufracv1.GPUFractionAutoscaler) bool {
	if da, db := a.DeletionTimestamp != nil, b.DeletionTimestamp != nil; da != db {
		return db
	}
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.UID < b.UID
}

// InCharge orders autoscalers that target one workload by Precedes and returns the
// one in charge (whose recommendation is applied) and the others (ignored: no
// recommendation of theirs is written into pods or acted on by the updater). It
// returns nil and no others for an empty slice; the slice itself is not reordered.
func InCharge(gfas []*gpufracv1.GPUFractionAutoscaler) (winner *gpufracv1.GPUFractionAutoscaler, losers []*gpufracv1.GPUFractionAutoscaler) {
	if len(gfas) == 0 {
		return nil, nil
	}
	s := append([]*gpufracv1.GPUFractionAutoscaler(nil), gfas...)
	sort.SliceStable(s, func(i, j int) bool { return Precedes(s[i], s[j]) })
	return s[0], s[1:]
}

// DuplicateMessage is the message users see on an ignored autoscaler: which one is in
// charge of the workload and why.
func DuplicateMessage(loser, winner *gpufracv1.GPUFractionAutoscaler, kind, name string) string {
	return fmt.Sprintf("GPUFractionAutoscaler %s (created %s) already targets %s %s and is in charge; this one (created %s) is ignored: "+
		"nothing applies its recommendation until it is deleted or retargeted",
		winner.Name, winner.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z"), kind, name, loser.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z"))
}

// WinnerMessage is the message users see on the autoscaler in charge when others
// target the same workload.
func WinnerMessage(winner *gpufracv1.GPUFractionAutoscaler, losers []*gpufracv1.GPUFractionAutoscaler, kind, name string) string {
	names := make([]string, len(losers))
	for i, l := range losers {
		names[i] = l.Name
	}
	sort.Strings(names)
	return fmt.Sprintf("GPUFractionAutoscaler(s) %v also target %s %s; %s is in charge (created first) and they are ignored; delete them", names, kind, name, winner.Name)
}
