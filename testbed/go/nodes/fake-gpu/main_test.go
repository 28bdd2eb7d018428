package main

import (
	"strings"
	"testing"
)

// The environment a container given two GPUs gets is what the images' nvidia-smi double reads
// (testbed/mmd_testbed/build_tools/nvidia_smi.py; its Python twin is fakegpu.fake_gpus_value).
func TestContainerEnvsNameEachAllocatedGPU(t *testing.T) {
	envs := containerEnvs([]string{"GPU-a", "GPU-b"}, identity{"NVIDIA H100 80GB HBM3", "9.0"})
	if got := envs[visibleDevicesEnv]; got != "GPU-a,GPU-b" {
		t.Errorf("%s = %q", visibleDevicesEnv, got)
	}
	if got := envs[fakeGpusEnv]; got != "NVIDIA H100 80GB HBM3,9.0;NVIDIA H100 80GB HBM3,9.0" {
		t.Errorf("%s = %q", fakeGpusEnv, got)
	}
}

// IDs are stable for a node (the kubelet's checkpoint names devices by ID) and differ between nodes.
func TestDeviceIDsAreStablePerNodeAndDistinctAcrossNodes(t *testing.T) {
	first, again, other := deviceIDs("real-node-0", 8), deviceIDs("real-node-0", 8), deviceIDs("real-node-1", 8)
	seen := map[string]bool{}
	for index, id := range first {
		if id != again[index] {
			t.Errorf("device %d: %s, then %s", index, id, again[index])
		}
		if !strings.HasPrefix(id, "GPU-") || len(id) != len("GPU-")+36 {
			t.Errorf("device %d: %q is not GPU-<uuid>", index, id)
		}
		seen[id] = true
	}
	for _, id := range other {
		seen[id] = true
	}
	if len(seen) != 16 {
		t.Errorf("%d distinct IDs of 16", len(seen))
	}
}
