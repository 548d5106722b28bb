package sharingplan

import (
	"fmt"

	"sigs.k8s.io/yaml"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// GPUResource is the resource NVIDIA's device plugin advertises whole GPUs as, and the
// one whose replicas the config sets.
const GPUResource = "nvidia.com/gpu"

// The NVIDIA k8s-device-plugin config file format (version v1, api/config/v1 of
// github.com/NVIDIA/k8s-device-plugin), the part gpufrac writes.
type (
	devicePluginConfig struct {
		Version string   `json:"version"`
		Sharing *sharing `json:"sharing,omitempty"`
	}
	sharing struct {
		TimeSlicing *replicatedResources `json:"timeSlicing,omitempty"`
		MPS         *replicatedResources `json:"mps,omitempty"`
	}
	replicatedResources struct {
		FailRequestsGreaterThanOne bool                 `json:"failRequestsGreaterThanOne,omitempty"`
		Resources                  []replicatedResource `json:"resources"`
	}
	replicatedResource struct {
		Name     string `json:"name"`
		Replicas int    `json:"replicas"`
	}
)

// DevicePluginConfig renders p as one entry of the device plugin's config ConfigMap
// (YAML): sharing.timeSlicing or sharing.mps with resources [{name: nvidia.com/gpu,
// replicas: N}]; time-slicing sets failRequestsGreaterThanOne, so a pod asking for two
// replicas is refused instead of getting two slices of one GPU. An Exclusive plan is a
// config without sharing. It returns an error only if YAML encoding fails.
func DevicePluginConfig(p Plan) (string, error) {
	c := devicePluginConfig{Version: "v1"}
	res := []replicatedResource{{Name: GPUResource, Replicas: p.Replicas}}
	switch p.Mode {
	case gpufracv1.SharingModeTimeSlicing:
		c.Sharing = &sharing{TimeSlicing: &replicatedResources{FailRequestsGreaterThanOne: true, Resources: res}}
	case gpufracv1.SharingModeMPS:
		c.Sharing = &sharing{MPS: &replicatedResources{Resources: res}}
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding device-plugin config: %w", err)
	}
	return string(b), nil
}

// Replicas reads back the replicas of nvidia.com/gpu from a device-plugin config entry:
// 1 when it shares nothing. It returns an error when the entry is not valid YAML of the
// format.
func Replicas(config string) (int, gpufracv1.SharingMode, error) {
	var c devicePluginConfig
	if err := yaml.UnmarshalStrict([]byte(config), &c); err != nil {
		return 0, "", fmt.Errorf("device-plugin config: %w", err)
	}
	if c.Sharing == nil {
		return 1, gpufracv1.SharingModeExclusive, nil
	}
	for _, s := range []struct {
		r    *replicatedResources
		mode gpufracv1.SharingMode
	}{{c.Sharing.TimeSlicing, gpufracv1.SharingModeTimeSlicing}, {c.Sharing.MPS, gpufracv1.SharingModeMPS}} {
		if s.r == nil {
			continue
		}
		for _, r := range s.r.Resources {
			if r.Name == GPUResource {
				return r.Replicas, s.mode, nil
			}
		}
	}
	return 1, gpufracv1.SharingModeExclusive, nil
}
