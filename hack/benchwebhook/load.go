package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

const (
	// apiWebhookHistogram is the API server's latency of each webhook call (label name:
	// the webhook's name), admission round trip included.
	apiWebhookHistogram = "apiserver_admission_webhook_admission_duration_seconds"
	// apiMatchHistogram is the API server's time evaluating a webhook's CEL
	// matchConditions (label name: the webhook's name).
	apiMatchHistogram = "apiserver_admission_match_condition_evaluation_seconds"
)

// result accumulates the runs of one target at one rate.
type result struct {
	target   *target
	created  int
	failed   int
	unpatch  int             // sampled pods the webhook did not change
	lat      []time.Duration // client-side pod-create latencies, every run
	runP99   []time.Duration // client-side p99 of each run
	achieved []float64       // pods per second each run reached
	server   framework.Histogram
	apiCall  framework.Histogram
	match    framework.Histogram
}

// measure creates o.pods pods in t's namespace at r per second, adds the latencies and
// the metric deltas to res, then deletes the pods and waits until they are gone.
func measure(ctx context.Context, c *framework.Cluster, t *target, r float64, o options, res *result) error {
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = float32(4*r), o.maxInFlight // never client-go's limiter: the rate limiter below paces
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	before, err := scrape(ctx, c, t)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, o.pods)
		fail int
		wg   sync.WaitGroup
		sem  = make(chan struct{}, o.maxInFlight)
		lim  = rate.NewLimiter(rate.Limit(r), 1)
	)
	start := time.Now()
	for i := range o.pods {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := t.pod(fmt.Sprintf("load-%d", i))
			s := time.Now()
			_, err := cs.CoreV1().Pods(t.namespace).Create(ctx, p, metav1.CreateOptions{})
			d := time.Since(s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fail++
				if fail <= 3 {
					logf("%s: create %s: %v", t.name, p.Name, err)
				}
				return
			}
			lat = append(lat, d)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := scrape(ctx, c, t)
	if err != nil {
		return err
	}
	res.created += len(lat)
	res.failed += fail
	res.lat = append(res.lat, lat...)
	res.runP99 = append(res.runP99, percentile(lat, 0.99))
	res.achieved = append(res.achieved, float64(len(lat))/elapsed.Seconds())
	res.server = res.server.Add(after.server.Sub(before.server))
	res.apiCall = res.apiCall.Add(after.apiCall.Sub(before.apiCall))
	res.match = res.match.Add(after.match.Sub(before.match))
	logf("%s at %g/s: %d pods in %v (%.0f/s), %d failed, create p50 %v p99 %v",
		t.name, r, len(lat), elapsed.Round(time.Millisecond), res.achieved[len(res.achieved)-1], fail,
		percentile(lat, 0.5).Round(time.Microsecond), percentile(lat, 0.99).Round(time.Microsecond))

	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(t.namespace), client.Limit(20)); err != nil {
		return err
	}
	for i := range pods.Items {
		if !t.mutated(&pods.Items[i]) {
			res.unpatch++
		}
	}
	return deletePods(ctx, c, t.namespace)
}

// deletePods deletes every pod of ns at once (no node runs them) and waits until the
// API server has none left, so that the next run starts from the same state.
func deletePods(ctx context.Context, c *framework.Cluster, ns string) error {
	if err := c.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		return err
	}
	return poll(ctx, 5*time.Minute, "pods of "+ns+" deleted", func() (bool, error) {
		var pods corev1.PodList
		err := c.Client.List(ctx, &pods, client.InNamespace(ns), client.Limit(1))
		return err == nil && len(pods.Items) == 0, err
	})
}

// scraped is one reading of the histograms a run compares.
type scraped struct{ server, apiCall, match framework.Histogram }

func scrape(ctx context.Context, c *framework.Cluster, t *target) (scraped, error) {
	var s scraped
	if t.webhookName == "" {
		return s, nil
	}
	var err error
	if s.server, err = framework.ScrapeHistogram(ctx, nil, t.metricsURL, t.histogram, t.label, t.value); err != nil {
		return s, fmt.Errorf("%s metrics: %w", t.name, err)
	}
	if s.apiCall, err = c.APIServerHistogram(ctx, apiWebhookHistogram, "name", t.webhookName); err != nil {
		return s, err
	}
	if s.match, err = c.APIServerHistogram(ctx, apiMatchHistogram, "name", t.webhookName); err != nil {
		return s, err
	}
	return s, nil
}
