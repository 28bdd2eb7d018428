package main

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// Versions are semantic versions, as DRA's version attributes must be.
func TestVersionOfMakesThreeNumbers(t *testing.T) {
	for given, want := range map[string]string{"9.0": "9.0.0", "8.9": "8.9.0", "550.127.05": "550.127.5"} {
		if got := versionOf(given); got != want {
			t.Errorf("versionOf(%q) = %q, want %q", given, got, want)
		}
	}
}

// Each GPU of the ResourceSlice has NVIDIA's DRA driver's attributes, its uuid the device plugin's ID.
func TestDRADevicesCarryNvidiasAttributes(t *testing.T) {
	gpu := identity{"NVIDIA A100-SXM4-80GB", "8.0", "Ampere", 81920, "550.127.05"}
	devices := draDevices([]string{"GPU-a", "GPU-b"}, gpu)
	if len(devices) != 2 || devices[1].Name != "gpu-1" {
		t.Fatalf("devices %v", devices)
	}
	attributes := devices[1].Attributes
	strings := map[string]string{"productName": gpu.productName, "architecture": "Ampere", "brand": "Nvidia", "uuid": "GPU-b"}
	for name, want := range strings {
		if value := attributes[resourceapi.QualifiedName(name)].StringValue; value == nil || *value != want {
			t.Errorf("%s = %v, want %q", name, value, want)
		}
	}
	if value := attributes["cudaComputeCapability"].VersionValue; value == nil || *value != "8.0.0" {
		t.Errorf("cudaComputeCapability = %v", value)
	}
	if memory := devices[0].Capacity["memory"].Value; memory.String() != "80Gi" {
		t.Errorf("memory = %s", memory.String())
	}
}
