package admission

import (
	"net/http"
	"runtime"
	"sync"
)

// workers serves requests on a few long-lived goroutines instead of the goroutine
// net/http starts for each one. The HTTP/2 server (which the API server's webhook calls
// use) runs every request on a new goroutine whose stack starts small (a few KiB) and is
// grown, by copying, several times while the pod is decoded by reflection: in the CPU
// profiles of make bench-webhook, runtime.newstack was 8–11 % of the webhook process. A
// worker's stack, once grown, stays grown between requests. grpc-go's server offers the
// same for the same reason (NumStreamWorkers).
//
// A request never waits for a worker: when none is idle it is served on its own
// goroutine, as without workers. A panic in h is raised again on the request's goroutine,
// where net/http handles it as usual.
type workers struct {
	h     http.Handler
	n     int
	jobs  chan *workerJob
	start sync.Once
}

// workerJob is one request handed to a worker; done receives the value of a panic in the
// handler, nil when it returned.
type workerJob struct {
	w    http.ResponseWriter
	r    *http.Request
	done chan any
}

var workerJobs = sync.Pool{New: func() any { return &workerJob{done: make(chan any, 1)} }}

// onWorkers returns h served by workers: GOMAXPROCS of them, started with the first
// request (they live as long as the process; idle ones cost only their stacks).
func onWorkers(h http.Handler) http.Handler {
	return &workers{h: h, n: runtime.GOMAXPROCS(0), jobs: make(chan *workerJob)}
}

func (p *workers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.start.Do(func() {
		for range p.n {
			go p.loop()
		}
	})
	j := workerJobs.Get().(*workerJob)
	j.w, j.r = w, r
	select {
	case p.jobs <- j: // an idle worker took it
		v := <-j.done
		j.w, j.r = nil, nil
		workerJobs.Put(j)
		if v != nil {
			panic(v)
		}
	default: // every worker busy: serve here
		j.w, j.r = nil, nil
		workerJobs.Put(j)
		p.h.ServeHTTP(w, r)
	}
}

func (p *workers) loop() {
	for j := range p.jobs {
		p.serve(j)
	}
}

func (p *workers) serve(j *workerJob) {
	defer func() { j.done <- recover() }()
	p.h.ServeHTTP(j.w, j.r)
}
