package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	vpav1 "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/admission"
	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/e2e/framework"
)

const (
	systemNS   = "bench-system" // gpufrac's Secret and both status Leases
	benchLabel = "gpufrac-bench"
	deployment = "load"
	container  = "main"
	// vpaWebhookName and vpaConfigName are what VPA's self-registration uses
	// (pkg/admission-controller/config.go), so its metrics read as in a real install.
	vpaWebhookName = "vpa.k8s.io"
	vpaConfigName  = "vpa-webhook-config"
	// unscheduled keeps the scheduler out of the measurement: no scheduler has this name.
	unscheduled = "bench-unscheduled"
	// noGPU is the target of pods without a GPU in a namespace gpufrac's webhook selects:
	// its CEL matchConditions are false, so the API server never calls it and records
	// the conditions' evaluation time (it records none when they are true).
	noGPU = "gpufrac-no-gpu"
)

// target is one namespace pods are created in and the webhook (if any) that sees them.
type target struct {
	name      string // gpufrac, vpa, none or gpufrac-no-gpu
	namespace string
	dep       *appsv1.Deployment
	// metricsURL, histogram and label select the webhook's own server-side latency
	// histogram ("" without a webhook).
	metricsURL, histogram, label, value string
	// webhookName is the webhook's name in the API server's metrics.
	webhookName string
	// pprofURL is the webhook's /debug/pprof/ base URL ("" when it serves none): the
	// first run at each rate records its CPU profile.
	pprofURL string
	// mutated reports whether a created pod is as the webhook should leave it (changed,
	// or for noGPU unchanged).
	mutated func(*corev1.Pod) bool
}

// setUp creates the CRDs, namespaces, workloads and autoscalers, starts both webhooks
// and waits until each mutates a dry-run pod.
func setUp(ctx context.Context, c *framework.Cluster, o options) ([]*target, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := c.InstallCRDs(ctx, filepath.Join(root, "charts", "gpufrac", "crds")); err != nil {
		return nil, err
	}
	if err := c.CreateCRDs(ctx, time.Minute, o.vpaCRDs); err != nil {
		return nil, err
	}
	if err := vpav1.AddToScheme(c.Scheme); err != nil {
		return nil, err
	}
	names := []string{"gpufrac", "vpa"}
	if o.baseline {
		names = append(names, "none")
	}
	if o.matchConditions {
		names = append(names, noGPU)
	}
	if err := createNamespace(ctx, c, systemNS, ""); err != nil {
		return nil, err
	}
	var targets []*target
	for _, n := range names {
		t := &target{name: n, namespace: "bench-" + n, mutated: func(*corev1.Pod) bool { return true }}
		label := n
		if n == noGPU {
			label = "gpufrac" // sent to gpufrac's webhook, whose matchConditions drop it
		}
		if err := createNamespace(ctx, c, t.namespace, label); err != nil {
			return nil, err
		}
		t.dep = gpuDeployment(t.namespace)
		if n == noGPU {
			delete(t.dep.Spec.Template.Spec.Containers[0].Resources.Limits, "nvidia.com/gpu")
		}
		if err := c.Client.Create(ctx, t.dep); err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	if err := startGPUFrac(ctx, c, o, targets[0]); err != nil {
		return nil, err
	}
	if err := startVPA(ctx, c, o, targets[1]); err != nil {
		return nil, err
	}
	for _, t := range targets {
		if t.name == noGPU {
			// Same webhook and metrics as gpufrac's; its server-side count stays 0.
			t.metricsURL, t.histogram, t.label, t.value, t.webhookName = targets[0].metricsURL, targets[0].histogram, targets[0].label, targets[0].value, targets[0].webhookName
			t.mutated = func(p *corev1.Pod) bool { return !targets[0].mutated(p) } // left unchanged
		}
	}
	for _, t := range targets {
		if err := waitServiceAccount(ctx, c, t.namespace); err != nil {
			return nil, err
		}
	}
	for _, t := range targets[:2] {
		if err := waitMutating(ctx, c, t); err != nil {
			return nil, err
		}
	}
	return targets, nil
}

func createNamespace(ctx context.Context, c *framework.Cluster, name, labelValue string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if labelValue != "" {
		ns.Labels = map[string]string{benchLabel: labelValue}
	}
	return c.Client.Create(ctx, ns)
}

// gpuDeployment is a replicas-0 Deployment whose pod template asks for one GPU in
// container "main"; the bench creates its pods itself.
func gpuDeployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": deployment}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployment},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SchedulerName: unscheduled,
					Containers: []corev1.Container{{
						Name:  container,
						Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
							Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
						},
					}},
				},
			},
		},
	}
}

// pod is a pod of t's Deployment (controller owner reference to it, as the issue's
// measurement did, so both webhooks find their autoscaler without a ReplicaSet).
func (t *target) pod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: t.namespace, Name: name, Labels: t.dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: t.dep.Name, UID: t.dep.UID, Controller: ptr.To(true)}},
		},
		Spec: *t.dep.Spec.Template.Spec.DeepCopy(),
	}
}

// startGPUFrac creates an Initial-mode GPUFractionAutoscaler with a recommendation for
// t's Deployment and starts bin/admission, which registers its own webhooks for
// namespaces labelled gpufrac-bench=gpufrac.
func startGPUFrac(ctx context.Context, c *framework.Cluster, o options, t *target) error {
	mode := gpufracv1.UpdateModeInitial
	gfa := &gpufracv1.GPUFractionAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: t.namespace, Name: deployment}}
	gfa.Spec.TargetRef.APIVersion, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name = "apps/v1", "Deployment", deployment
	gfa.Spec.UpdatePolicy = &gpufracv1.UpdatePolicy{UpdateMode: &mode}
	gfa.Spec.Backend = &gpufracv1.Backend{Type: gpufracv1.BackendAnnotations}
	if err := c.Client.Create(ctx, gfa); err != nil {
		return err
	}
	if _, err := c.WriteRecommendation(ctx, gfa, container, "benchwebhook"); err != nil {
		return err
	}
	ports, err := framework.FreePorts(4)
	if err != nil {
		return err
	}
	if _, err := c.StartProcessEnv("gpufrac-admission", filepath.Join(o.binDir, "admission"), o.gpufracEnv,
		"--kubeconfig="+c.Kubeconfig,
		"--namespace="+systemNS,
		"--identity=benchwebhook",
		"--webhook-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", ports[0]),
		"--register-webhooks",
		fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", ports[0]),
		"--webhook-config-name=gpufrac-bench",
		"--namespace-label-selector="+benchLabel+"=gpufrac",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[2]),
		fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports[3]),
	); err != nil {
		return err
	}
	t.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])
	t.pprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", ports[3])
	t.histogram, t.label, t.value = "gpufrac_admission_request_duration_seconds", "webhook", admission.WebhookMutatePods
	t.webhookName = admission.MutatingWebhookName
	t.mutated = func(p *corev1.Pod) bool { _, ok := p.Annotations[gpufracv1.AnnotationApplied]; return ok }
	return waitHTTP(ctx, c, "gpufrac-admission", fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2]))
}

// startVPA creates an Initial-mode VerticalPodAutoscaler with a recommendation for t's
// Deployment, starts bin/vpa-admission-controller with its own serving certificate and
// self-registration off, and registers it as VPA's self-registration would, limited
// to namespaces labelled gpufrac-bench=vpa.
func startVPA(ctx context.Context, c *framework.Cluster, o options, t *target) error {
	mode := vpav1.UpdateModeInitial
	vpa := &vpav1.VerticalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: t.namespace, Name: deployment},
		Spec: vpav1.VerticalPodAutoscalerSpec{
			TargetRef:    &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment},
			UpdatePolicy: &vpav1.PodUpdatePolicy{UpdateMode: &mode},
		},
	}
	if err := c.Client.Create(ctx, vpa); err != nil {
		return err
	}
	cpu, mem := resource.MustParse("250m"), resource.MustParse("256Mi")
	vpa.Status.Recommendation = &vpav1.RecommendedPodResources{ContainerRecommendations: []vpav1.RecommendedContainerResources{{
		ContainerName: container,
		Target:        corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
		LowerBound:    corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
		UpperBound:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}}}
	vpa.Status.Conditions = []vpav1.VerticalPodAutoscalerCondition{{Type: vpav1.RecommendationProvided, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := c.Client.Status().Update(ctx, vpa); err != nil {
		return err
	}
	cert, err := framework.WriteServingCert(filepath.Join(c.Dir, "pki", "vpa"), "vpa-webhook")
	if err != nil {
		return err
	}
	ports, err := framework.FreePorts(2)
	if err != nil {
		return err
	}
	if _, err := c.StartProcess("vpa-admission-controller", filepath.Join(o.binDir, "vpa-admission-controller"),
		"--kubeconfig="+c.Kubeconfig,
		"--register-webhook=false",
		fmt.Sprintf("--port=%d", ports[0]),
		fmt.Sprintf("--address=127.0.0.1:%d", ports[1]),
		"--tls-cert-file="+cert.CertFile,
		"--tls-private-key="+cert.KeyFile,
		"--client-ca-file="+cert.CAFile,
		"--status-lease-namespace="+systemNS,
		"--v=4", "--stderrthreshold=info", // as VPA's deploy/admission-controller-deployment.yaml
	); err != nil {
		return err
	}
	t.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])
	t.histogram, t.label, t.value = "vpa_admission_controller_admission_latency_seconds", "resource", "Pod"
	t.webhookName = vpaWebhookName
	t.mutated = func(p *corev1.Pod) bool {
		_, ok := p.Annotations["vpaUpdates"]
		return ok && p.Spec.Containers[0].Resources.Requests.Cpu().Cmp(cpu) == 0
	}
	if err := waitHTTP(ctx, c, "vpa-admission-controller", fmt.Sprintf("http://127.0.0.1:%d/health-check", ports[1])); err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/", ports[0])
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	return c.Client.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: vpaConfigName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    vpaWebhookName,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}},
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"autoscaling.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"verticalpodautoscalers"}}},
			},
			FailurePolicy:     &ignore,
			ClientConfig:      admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: cert.CAPEM},
			SideEffects:       &none,
			TimeoutSeconds:    ptr.To[int32](30), // VPA's --webhook-timeout-seconds default
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{benchLabel: "vpa"}},
		}},
	})
}

// waitHTTP polls url until it answers 200, the process exits or a minute passes.
func waitHTTP(ctx context.Context, c *framework.Cluster, process, url string) error {
	return poll(ctx, time.Minute, process+" ready", func() (bool, error) {
		if err := c.ProcessError(process); err != nil {
			return false, backoffStop{err}
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func waitServiceAccount(ctx context.Context, c *framework.Cluster, ns string) error {
	return poll(ctx, time.Minute, "service account "+ns+"/default", func() (bool, error) {
		var sa corev1.ServiceAccount
		err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "default"}, &sa)
		return err == nil, err
	})
}

// waitMutating waits until a dry-run pod of t comes back changed by t's webhook: its
// caches hold the autoscaler and the API server calls it.
func waitMutating(ctx context.Context, c *framework.Cluster, t *target) error {
	return poll(ctx, time.Minute, t.name+" webhook mutating pods", func() (bool, error) {
		p := t.pod("")
		p.GenerateName = "probe-"
		if err := c.Client.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err
		}
		return t.mutated(p), fmt.Errorf("pod not mutated: annotations %v, resources %v", p.Annotations, p.Spec.Containers[0].Resources)
	})
}

// backoffStop ends poll early with its error.
type backoffStop struct{ error }

// poll calls check every 200ms until it returns true, returns a backoffStop error, ctx
// ends or timeout passes; the error then quotes check's last error.
func poll(ctx context.Context, timeout time.Duration, what string, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := check()
		if ok {
			return nil
		}
		var stop backoffStop
		if errors.As(err, &stop) {
			return stop.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v: %v", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
