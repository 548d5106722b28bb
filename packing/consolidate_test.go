package packing

import (
	"slices"
	"testing"
)

func tenant(memGiB, compute int64, movable bool) Tenant {
	a := Alloc{MemoryBytes: memGiB * gib, ComputeMilli: compute}
	return Tenant{Alloc: a, Next: a, Movable: movable}
}

func TestConsolidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		devs  []Device
		o     ConsolidationOptions
		drain int
		dest  []int
	}{
		{
			name: "least held device emptied onto the fullest that fits",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(50, 0, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(10, 0, true), tenant(5, 0, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(30, 0, true)}},
			},
			drain: 1, dest: []int{0, 0},
		},
		{
			name: "an immovable tenant keeps its device; the next one is emptied",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(10, 0, false)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(20, 0, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(40, 0, true)}},
			},
			drain: 1, dest: []int{2},
		},
		{
			name: "tenants moved to one device count against it",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(25, 0, true), tenant(25, 0, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(55, 0, false)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(55, 0, false)}},
			},
			drain: 0, dest: []int{1, 2},
		},
		{
			name: "nothing fits elsewhere",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(45, 0, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(40, 0, true)}},
			},
			drain: -1,
		},
		{
			name: "the replacement's size decides, not the current one",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{{Alloc: Alloc{MemoryBytes: 45 * gib}, Next: Alloc{MemoryBytes: 30 * gib}, Movable: true}}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(50, 0, false)}},
			},
			drain: 0, dest: []int{1},
		},
		{
			name: "compute slack is kept",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(10, 200, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(40, 400, false)}},
			},
			drain: -1,
		},
		{
			name: "a higher compute limit lets it move",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(10, 200, true)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(40, 400, false)}},
			},
			o:     ConsolidationOptions{MaxComputeMilli: 700},
			drain: 0, dest: []int{1},
		},
		{
			name: "a tenant goes only where it is allowed",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{{Alloc: Alloc{MemoryBytes: 10 * gib}, Next: Alloc{MemoryBytes: 10 * gib}, Movable: true, Allowed: func(i int) bool { return i != 1 }}}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(60, 0, false)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(30, 0, false)}},
			},
			drain: 0, dest: []int{2},
		},
		{
			name: "a device with no tenant slot left takes none",
			devs: []Device{
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(10, 0, true)}},
				{MemoryBytes: 80 * gib, MaxTenants: 2, Tenants: []Tenant{tenant(20, 0, false), tenant(20, 0, false)}},
				{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(30, 0, false)}},
			},
			drain: 0, dest: []int{2},
		},
		{
			name:  "empty devices are neither emptied nor filled",
			devs:  []Device{{MemoryBytes: 80 * gib, Tenants: []Tenant{tenant(10, 0, true)}}, {MemoryBytes: 80 * gib}},
			drain: -1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drain, dest, ok := Consolidation(tc.devs, tc.o)
			if ok != (tc.drain >= 0) || drain != tc.drain || !slices.Equal(dest, tc.dest) {
				t.Fatalf("Consolidation = %d %v %v, want %d %v", drain, dest, ok, tc.drain, tc.dest)
			}
		})
	}
}
