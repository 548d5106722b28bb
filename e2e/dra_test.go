package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/e2e/framework"
)

const (
	draSystemNS = "e2e-dra-system"
	draNS       = "e2e-dra"
	draClass    = "gpu.nvidia.com" // the DeviceClass and driver name of NVIDIA's DRA driver
)

// draMPS is the GpuConfig part the test expects for admRecommendation's targets (3Gi,
// 250m, MPS): the pinned memory limit in whole MiB and the thread percentage.
type draMPS struct {
	Kind    string `json:"kind"`
	Sharing struct {
		Strategy  string `json:"strategy"`
		MpsConfig struct {
			DefaultActiveThreadPercentage  int               `json:"defaultActiveThreadPercentage"`
			DefaultPinnedDeviceMemoryLimit resource.Quantity `json:"defaultPinnedDeviceMemoryLimit"`
		} `json:"mpsConfig"`
	} `json:"sharing"`
}

// TestDRA: on Dynamic Resource Allocation (resource.k8s.io/v1, served by the local API
// server), a Deployment whose pods claim a GPU of NVIDIA's device class through a
// ResourceClaimTemplate, with an autoscaler on the dra backend and a recommendation,
// gets pods whose claim comes from a gpufrac template with the MPS limits of the
// recommendation; the real scheduler allocates each claim a distinct device of the
// ResourceSlices published for the KWOK nodes, and the claim carries the limits.
func TestDRA(t *testing.T) {
	ctx := t.Context()
	c := testCluster.Client
	if err := resourcev1.AddToScheme(testCluster.Scheme); err != nil {
		t.Fatal(err)
	}
	admNamespace(t, draSystemNS, false)
	admNamespace(t, draNS, true)
	draPublishDevices(t)
	startAdmissionIn(t, draSystemNS)

	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: draNS, Name: "gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draClass}}},
		}}},
	}
	dep := gpuDeployment(draNS, "dra-app", "main", 0)
	spec := &dep.Spec.Template.Spec
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
	spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
	gfa := admAutoscaler(draNS, "dra-app", gpufracv1.UpdateModeInitial, gpufracv1.BackendDRA)
	create(t, tmpl, gfa)
	admRecommendation(t, gfa)

	// The webhook has the autoscaler and recommendation in its cache when a dry-run pod
	// (its template write a server-side dry run) comes back rewritten.
	create(t, dep)
	waitFor(t, time.Minute, "dry-run pod on a gpufrac claim template", func() (bool, error) {
		p, err := dryRunPod(ctx, dep)
		if err != nil {
			return false, err
		}
		return strings.HasPrefix(ptr.Deref(p.Spec.ResourceClaims[0].ResourceClaimTemplateName, ""), "gpu-gpufrac-"), nil
	})
	scale(t, dep, 2)

	var claims []resourcev1.ResourceClaim
	waitFor(t, 2*time.Minute, "2 pods of dra-app with allocated claims", func() (bool, error) {
		claims = nil
		for _, p := range admPods(t, draNS, "dra-app") {
			if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				continue
			}
			if n := ptr.Deref(p.Spec.ResourceClaims[0].ResourceClaimTemplateName, ""); !strings.HasPrefix(n, "gpu-gpufrac-") {
				return false, fmt.Errorf("pod %s claims from template %q, want a gpufrac template", p.Name, n)
			}
			var rc resourcev1.ResourceClaim
			if err := c.Get(ctx, types.NamespacedName{Namespace: draNS, Name: *p.Status.ResourceClaimStatuses[0].ResourceClaimName}, &rc); err != nil {
				return false, err
			}
			if rc.Status.Allocation == nil {
				return false, nil
			}
			if res := rc.Status.Allocation.Devices.Results; len(res) != 1 || res[0].Pool != p.Spec.NodeName || res[0].Driver != draClass {
				return false, fmt.Errorf("claim %s allocated %+v, want one %s device of node %s", rc.Name, res, draClass, p.Spec.NodeName)
			}
			claims = append(claims, rc)
		}
		return len(claims) == 2, nil
	})
	if a, b := claims[0].Status.Allocation.Devices.Results[0], claims[1].Status.Allocation.Devices.Results[0]; a.Pool == b.Pool && a.Device == b.Device {
		t.Errorf("both claims allocated %s/%s; want distinct devices", a.Pool, a.Device)
	}
	for _, rc := range claims {
		// The limits travel in the claim's spec and in its allocation (what the driver reads).
		cfgs := rc.Spec.Devices.Config
		alloc := rc.Status.Allocation.Devices.Config
		if len(cfgs) != 1 || cfgs[0].Opaque == nil || cfgs[0].Opaque.Driver != draClass || len(alloc) != 1 || alloc[0].Opaque == nil {
			t.Fatalf("claim %s config %+v, allocation config %+v; want one opaque %s GpuConfig", rc.Name, cfgs, alloc, draClass)
		}
		var g draMPS
		if err := json.Unmarshal(alloc[0].Opaque.Parameters.Raw, &g); err != nil {
			t.Fatal(err)
		}
		m := g.Sharing.MpsConfig
		if g.Kind != backend.GpuConfigKind || g.Sharing.Strategy != backend.GpuSharingMPS || m.DefaultActiveThreadPercentage != 25 || m.DefaultPinnedDeviceMemoryLimit.Value() != 3<<30 {
			t.Errorf("claim %s GpuConfig %s; want MPS with 25%% of the threads and 3Gi pinned (the recommendation's 250m and 3Gi)", rc.Name, alloc[0].Opaque.Parameters.Raw)
		}
	}
	// The updater's view: Read of a pod returns what the webhook recorded.
	pods := admPods(t, draNS, "dra-app")
	codec := backend.New(backend.Config{DRA: backend.DRAConfig{Templates: backend.ClientClaimTemplates{Reader: c}}})[gpufracv1.BackendDRA]
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if got := codec.Read(&p)["main"]; got.Memory != 3<<30 || got.Compute != 250 {
			t.Errorf("pod %s: Read %+v, want 3Gi and 250m", p.Name, got)
		}
	}
}

// draPublishDevices creates NVIDIA's DeviceClass and, for every KWOK GPU node, a
// ResourceSlice of the driver with one device per nvidia.com/gpu of the node (as the
// driver's kubelet plugin publishes them), removed when the test ends.
func draPublishDevices(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", draClass, draClass),
		}}}},
	}
	create(t, class)
	objs := []client.Object{class}
	var nodes corev1.NodeList
	if err := testCluster.Client.List(ctx, &nodes, client.MatchingLabels{framework.KWOKNodeLabel: "kwok"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		q := n.Status.Capacity[framework.GPUResource]
		slice := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-" + draClass},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   draClass,
				Pool:     resourcev1.ResourcePool{Name: n.Name, ResourceSliceCount: 1},
				NodeName: ptr.To(n.Name),
			},
		}
		for i := range q.Value() {
			slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{
				Name: fmt.Sprintf("gpu-%d", i),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type":        {StringValue: ptr.To("gpu")},
					"productName": {StringValue: ptr.To(framework.GPUProduct)},
				},
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
					"memory": {Value: *resource.NewQuantity(int64(framework.GPUMemoryMiB)<<20, resource.BinarySI)},
				},
			})
		}
		create(t, slice)
		objs = append(objs, slice)
	}
	if len(objs) == 1 {
		t.Fatal("no KWOK GPU nodes")
	}
	t.Cleanup(func() {
		for _, o := range objs {
			_ = testCluster.Client.Delete(context.Background(), o)
		}
	})
}
