package framework

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels of the fake GPU nodes, as NVIDIA's GPU feature discovery sets them.
const (
	// GPUResource is the extended resource the fake nodes offer.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPUProductLabel names the GPU model; the fake nodes carry GPUProduct.
	GPUProductLabel = "nvidia.com/gpu.product"
	// GPUMemoryLabel is the memory of one GPU in MiB; the fake nodes carry GPUMemoryMiB.
	GPUMemoryLabel = "nvidia.com/gpu.memory"
	// GPUCountLabel is the number of GPUs of the node.
	GPUCountLabel = "nvidia.com/gpu.count"
	// GPUProduct is the GPU model of the fake nodes.
	GPUProduct = "NVIDIA-H100-80GB-HBM3"
	// GPUMemoryMiB is the memory of one fake GPU in MiB (H100 80GB HBM3).
	GPUMemoryMiB = 81559
	// KWOKNodeLabel is a label every fake node carries with value "kwok".
	KWOKNodeLabel = "type"

	kwokNodeAnnotation = "kwok.x-k8s.io/node"
)

// CreateGPUNode creates a KWOK fake node named name with gpus nvidia.com/gpu (plus
// 64 CPUs, 512Gi memory, 110 pods) and the NVIDIA labels, untainted. KWOK then marks
// it Ready within about a second. It errors if the node exists.
func (c *Cluster) CreateGPUNode(ctx context.Context, name string, gpus int) error {
	return c.CreateGPUNodeWith(ctx, name, gpus, nil)
}

// CreateGPUNodeWith is CreateGPUNode with mod applied to the node before it is created
// (extra allocatable resources, annotations, taints); nil changes nothing.
func (c *Cluster) CreateGPUNodeWith(ctx context.Context, name string, gpus int, mod func(*corev1.Node)) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				kwokNodeAnnotation:             "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
			Labels: map[string]string{
				"kubernetes.io/arch":     "amd64",
				"kubernetes.io/os":       "linux",
				"kubernetes.io/hostname": name,
				KWOKNodeLabel:            "kwok",
				GPUProductLabel:          GPUProduct,
				GPUMemoryLabel:           strconv.Itoa(GPUMemoryMiB),
				GPUCountLabel:            strconv.Itoa(gpus),
			},
		},
		// Status given at create time is kept; KWOK's node-initialize stage keeps
		// capacity/allocatable and adds conditions, addresses and nodeInfo.
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: c.nextNodeIP()},
				{Type: corev1.NodeHostName, Address: name},
			},
		},
	}
	if mod != nil {
		mod(node)
	}
	if err := c.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	c.mu.Lock()
	if !slices.Contains(c.st.Nodes, name) {
		c.st.Nodes = append(c.st.Nodes, name)
	}
	c.mu.Unlock()
	return c.save()
}

// nextNodeIP returns a distinct fake InternalIP (10.240.x.y) for the next node.
func (c *Cluster) nextNodeIP() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.st.Nodes)
	return fmt.Sprintf("10.240.%d.%d", n/250, n%250+1)
}

// nodesReady checks that every created node has condition Ready=True.
func (c *Cluster) nodesReady(ctx context.Context) error {
	for _, name := range c.NodeNames() {
		var n corev1.Node
		if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			return err
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s not Ready yet", name)
		}
	}
	return nil
}

func (c *Cluster) defaultServiceAccount(ctx context.Context) error {
	var sa corev1.ServiceAccount
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "default"}, &sa)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("service account default/default not created yet")
	}
	return err
}

// kwokStages is kwok's configuration: without Stage objects kwok v0.8.0 exits with
// "no stages found". These are kwok's own default "fast" stages (node-initialize,
// node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete) from
// sigs.k8s.io/kwok@v0.8.0/kustomize/stage, as kwokctl configures them.
//
//go:embed kwok-stages.yaml
var kwokStages string
