// Package packing places GPU fractions onto whole GPUs the way a fraction-aware
// scheduler would: best fit by memory among the GPUs in use whose free memory and
// compute fit the pod (compute shares on one GPU sum to at most one GPU), else a new
// GPU. Pods never move once placed (no live migration); a GPU is released when its last
// tenant leaves. The savings report and the what-if simulator both use it.
package packing

// Alloc is a pod's GPU allocation: memory in bytes and compute in thousandths of one
// GPU (milli-GPU, 1000 = a whole GPU; 0 = compute not partitioned, so the packer does
// not constrain it). Integers keep packing exact.
type Alloc struct {
	MemoryBytes  int64 `json:"memoryBytes"`
	ComputeMilli int64 `json:"computeMilli"`
}

// GPU is one device and what is placed on it.
type GPU struct {
	// MemoryBytes and ComputeMilli are the sums of the tenants' allocations.
	MemoryBytes, ComputeMilli int64
	// Tenants are the caller's IDs of the pods placed here.
	Tenants []int
}

// Packer holds GPUs of one memory size. The zero value is not usable: use New.
type Packer struct {
	capacity int64
	gpus     []*GPU
	free     []int // released GPU indexes, reused before new ones
	held     int   // GPUs with at least one tenant
	peak     int
}

// New returns an empty packer for GPUs of capacityBytes memory each.
func New(capacityBytes int64) *Packer { return &Packer{capacity: capacityBytes} }

// Place puts tenant id with allocation a on a GPU and returns the GPU's index. An
// allocation larger than one GPU gets a GPU of its own.
func (p *Packer) Place(id int, a Alloc) int {
	best, bestLeft := -1, int64(0)
	for i, g := range p.gpus {
		if len(g.Tenants) == 0 || g.MemoryBytes+a.MemoryBytes > p.capacity || g.ComputeMilli+a.ComputeMilli > 1000 {
			continue
		}
		if left := p.capacity - g.MemoryBytes - a.MemoryBytes; best < 0 || left < bestLeft {
			best, bestLeft = i, left
		}
	}
	if best < 0 {
		if n := len(p.free); n > 0 {
			best = p.free[n-1]
			p.free = p.free[:n-1]
		} else {
			best = len(p.gpus)
			p.gpus = append(p.gpus, &GPU{})
		}
		p.held++
		p.peak = max(p.peak, p.held)
	}
	g := p.gpus[best]
	g.MemoryBytes += a.MemoryBytes
	g.ComputeMilli += a.ComputeMilli
	g.Tenants = append(g.Tenants, id)
	return best
}

// PlaceOn puts tenant id with allocation a on GPU i, which must be held (have a
// tenant): where Consolidation chose to move it. It does not check that a fits.
func (p *Packer) PlaceOn(id, i int, a Alloc) {
	g := p.gpus[i]
	g.MemoryBytes += a.MemoryBytes
	g.ComputeMilli += a.ComputeMilli
	g.Tenants = append(g.Tenants, id)
}

// Remove takes tenant id with allocation a off GPU i.
func (p *Packer) Remove(id, i int, a Alloc) {
	g := p.gpus[i]
	for j, t := range g.Tenants {
		if t == id {
			g.Tenants[j] = g.Tenants[len(g.Tenants)-1]
			g.Tenants = g.Tenants[:len(g.Tenants)-1]
			break
		}
	}
	g.MemoryBytes -= a.MemoryBytes
	g.ComputeMilli -= a.ComputeMilli
	if len(g.Tenants) == 0 {
		g.MemoryBytes, g.ComputeMilli = 0, 0
		p.free = append(p.free, i)
		p.held--
	}
}

// Held is the number of GPUs with at least one tenant; Peak the most ever held.
func (p *Packer) Held() int { return p.held }

// Peak is the largest number of GPUs held at once.
func (p *Packer) Peak() int { return p.peak }

// GPU returns device i (read-only).
func (p *Packer) GPU(i int) *GPU { return p.gpus[i] }

// Len is the number of devices ever opened, held or released.
func (p *Packer) Len() int { return len(p.gpus) }
