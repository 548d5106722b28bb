package admission

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestWorkersServeEveryRequest: more concurrent requests than workers are all in the
// handler at once (those that find every worker busy are served on their own goroutine,
// none waits for a worker), each with its own request and response writer, and the
// workers serve again after the burst.
func TestWorkersServeEveryRequest(t *testing.T) {
	release := make(chan struct{})
	h := onWorkers(nil)
	n := 4 * h.(*workers).n
	entered := make(chan struct{}, n)
	h.(*workers).h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("block") != "" {
			entered <- struct{}{}
			<-release
		}
		_, _ = w.Write([]byte(r.URL.Query().Get("i")))
	})
	var wg sync.WaitGroup
	got := make([]string, n)
	for i := range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/?block=1&i="+strconv.Itoa(i), nil))
			got[i] = rec.Body.String()
		})
	}
	for range n {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("requests wait for a busy worker")
		}
	}
	close(release)
	wg.Wait()
	for i, g := range got {
		if g != strconv.Itoa(i) {
			t.Errorf("request %d answered %q", i, g)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/?i=after", nil))
	if rec.Body.String() != "after" {
		t.Errorf("request after the burst answered %q", rec.Body.String())
	}
}

// TestWorkersPanic: a panic in the handler on a worker is raised again on the request's
// goroutine with the same value (net/http's handling of handler panics applies), and the
// worker serves the next request.
func TestWorkersPanic(t *testing.T) {
	h := onWorkers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("panic") != "" {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	for range 2 * h.(*workers).n { // every worker panics once
		func() {
			defer func() {
				if v := recover(); v != http.ErrAbortHandler {
					t.Errorf("recovered %v, want http.ErrAbortHandler", v)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/?panic=1", nil))
			t.Error("no panic")
		}()
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("after the panics: status %d", rec.Code)
	}
}
