package v1alpha1

import "testing"

func TestPodNeed(t *testing.T) {
	type add struct {
		t ContainerType
		v int64
	}
	for _, tc := range []struct {
		name string
		adds []add
		want int64
	}{
		{"regular containers add up", []add{{ContainerTypeRegular, 3000}, {"", 1000}}, 4000},
		{"a larger init container is the need", []add{{ContainerTypeInit, 5000}, {ContainerTypeRegular, 3000}, {ContainerTypeSidecar, 1000}}, 5000},
		{"a smaller init container adds nothing", []add{{ContainerTypeInit, 2000}, {ContainerTypeSidecar, 1000}, {ContainerTypeRegular, 3000}}, 4000},
		{"init containers take the largest, not the sum", []add{{ContainerTypeInit, 2500}, {ContainerTypeInit, 2000}, {ContainerTypeRegular, 1000}}, 2500},
		{"an init container after a sidecar runs next to it", []add{{ContainerTypeSidecar, 2000}, {ContainerTypeInit, 3500}, {ContainerTypeRegular, 1000}}, 5500},
		{"an init container before a sidecar does not", []add{{ContainerTypeInit, 3500}, {ContainerTypeSidecar, 2000}, {ContainerTypeRegular, 1000}}, 3500},
		{"only init containers", []add{{ContainerTypeInit, 700}}, 700},
	} {
		var n PodNeed
		for _, a := range tc.adds {
			n.Add(a.t, a.v)
		}
		if got, ok := n.Total(); !ok || got != tc.want {
			t.Errorf("%s: %d %t, want %d", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := (PodNeed{}).Total(); ok {
		t.Error("an empty need has a total")
	}
}
