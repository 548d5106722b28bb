package packing

import "testing"

const gib = 1 << 30

func TestBestFit(t *testing.T) {
	p := New(80 * gib)
	a := p.Place(1, Alloc{MemoryBytes: 50 * gib, ComputeMilli: 300})
	b := p.Place(2, Alloc{MemoryBytes: 40 * gib, ComputeMilli: 300}) // does not fit next to a
	c := p.Place(3, Alloc{MemoryBytes: 30 * gib, ComputeMilli: 300}) // fits both; best fit is a (30 GiB left vs 40)
	if a == b || c != a || p.Held() != 2 {
		t.Fatalf("placements a=%d b=%d c=%d held=%d", a, b, c, p.Held())
	}
	d := p.Place(4, Alloc{MemoryBytes: 10 * gib, ComputeMilli: 500}) // compute: a has 600m, b 300m → b
	if d != b {
		t.Fatalf("compute constraint: d on %d, want %d", d, b)
	}
	p.Remove(2, b, Alloc{MemoryBytes: 40 * gib, ComputeMilli: 300})
	p.Remove(4, b, Alloc{MemoryBytes: 10 * gib, ComputeMilli: 500})
	if p.Held() != 1 || p.Peak() != 2 {
		t.Fatalf("held %d peak %d after releasing b", p.Held(), p.Peak())
	}
	if e := p.Place(5, Alloc{MemoryBytes: 60 * gib}); e != b {
		t.Fatalf("a released GPU is reused first: got %d, want %d", e, b)
	}
}
