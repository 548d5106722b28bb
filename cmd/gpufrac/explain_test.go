package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestPackingLine(t *testing.T) {
	qp := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	const gpu80 = 80 << 30
	for _, tc := range []struct {
		name         string
		target, peak *resource.Quantity
		want         []string
	}{
		{"a little above half: two fit if ≤ 40Gi, peak leaves room", qp("42Gi"), qp("36Gi"), []string{"1 fit one 80Gi GPU", "2 fit if ≤ 40Gi", "leaves 4Gi"}},
		{"a third: three fit, four if ≤ 20Gi, not safe under the peak", qp("26Gi"), qp("22Gi"), []string{"3 fit one 80Gi GPU", "4 fit if ≤ 20Gi", "not safe"}},
		{"no peak", qp("30Gi"), nil, []string{"2 fit one 80Gi GPU", "3 fit if ≤ 27306Mi"}},
	} {
		got := packingLine(tc.target, tc.peak, gpu80)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
	if got := packingLine(nil, qp("1Gi"), gpu80); got != "" {
		t.Errorf("no target: %q, want empty", got)
	}
}
