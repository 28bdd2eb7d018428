package main

// The DRA half: with --dra-kubeconfig the plugin is also a DRA kubelet plugin for driver gpu.nvidia.com
// (k8s.io/dynamic-resource-allocation/kubeletplugin at the cluster's version). It publishes the node's
// ResourceSlice, one device per fake GPU with the attributes NVIDIA's DRA driver gives its GPUs
// (productName, architecture, brand, cudaComputeCapability, driverVersion, uuid), and prepares a claim's
// devices with a CDI spec of the claim (in --cdi-dir, which the node's containerd reads) that sets the
// same NVIDIA_VISIBLE_DEVICES and FAKE_NVIDIA_GPUS as the device plugin's Allocate.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

const (
	draDriverName = "gpu.nvidia.com"
	// The CDI kind of a prepared claim; each claim is one CDI device named after its UID.
	cdiKind = "k8s.gpu.nvidia.com/claim"
)

// draSettings is what the DRA half needs besides the GPUs.
type draSettings struct {
	kubeconfig  string
	registryDir string
	pluginDir   string
	cdiDir      string
	node        string
}

type draDriver struct {
	settings draSettings
	gpu      identity
	// The node's device names (gpu-<index>) and their IDs.
	ids    map[string]string
	cancel context.CancelCauseFunc
}

// versionOf makes a semantic version of "9.0" or "550.127.05" (three numbers, no leading zeros).
func versionOf(dotted string) string {
	parts := strings.Split(dotted, ".")
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for index, part := range parts {
		if number, err := strconv.Atoi(part); err == nil {
			parts[index] = strconv.Itoa(number)
		}
	}
	return strings.Join(parts[:3], ".")
}

// devices is the node's ResourceSlice content.
func draDevices(ids []string, gpu identity) []resourceapi.Device {
	devices := make([]resourceapi.Device, len(ids))
	for index, id := range ids {
		attribute := func(value string) resourceapi.DeviceAttribute {
			return resourceapi.DeviceAttribute{StringValue: &value}
		}
		version := func(value string) resourceapi.DeviceAttribute {
			value = versionOf(value)
			return resourceapi.DeviceAttribute{VersionValue: &value}
		}
		position := int64(index)
		devices[index] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", index),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":                 {IntValue: &position},
				"uuid":                  attribute(id),
				"productName":           attribute(gpu.productName),
				"architecture":          attribute(gpu.architecture),
				"brand":                 attribute("Nvidia"),
				"cudaComputeCapability": version(gpu.computeCapability),
				"driverVersion":         version(gpu.driverVersion),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse(fmt.Sprintf("%dMi", gpu.memoryMiB))},
			},
		}
	}
	return devices
}

func (d *draDriver) cdiSpecPath(claim types.UID) string {
	return filepath.Join(d.settings.cdiDir, fmt.Sprintf("%s_%s.json", strings.ReplaceAll(cdiKind, "/", "-"), claim))
}

// writeCDISpec writes the claim's CDI device: the environment of the devices it was given.
func (d *draDriver) writeCDISpec(claim types.UID, ids []string) error {
	envs := containerEnvs(ids, d.gpu)
	edits := []string{}
	for _, name := range []string{visibleDevicesEnv, fakeGpusEnv} {
		edits = append(edits, name+"="+envs[name])
	}
	spec := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       cdiKind,
		"devices": []map[string]any{
			{"name": string(claim), "containerEdits": map[string]any{"env": edits}},
		},
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	// Written whole, then renamed: the runtime may read the directory at any time.
	path := d.cdiSpecPath(claim)
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func (d *draDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		var prepared kubeletplugin.PrepareResult
		var ids []string
		for _, allocated := range claim.Status.Allocation.Devices.Results {
			if allocated.Driver != draDriverName {
				continue
			}
			id, known := d.ids[allocated.Device]
			if allocated.Pool != d.settings.node || !known {
				prepared.Err = fmt.Errorf("device %s/%s is not on node %s", allocated.Pool, allocated.Device, d.settings.node)
				break
			}
			ids = append(ids, id)
			prepared.Devices = append(prepared.Devices, kubeletplugin.Device{
				Requests:     []string{allocated.Request},
				PoolName:     allocated.Pool,
				DeviceName:   allocated.Device,
				CDIDeviceIDs: []string{cdiKind + "=" + string(claim.UID)},
			})
		}
		if prepared.Err == nil {
			prepared.Err = d.writeCDISpec(claim.UID, ids)
		}
		if prepared.Err == nil {
			log.Printf("prepared claim %s/%s: %s", claim.Namespace, claim.Name, strings.Join(ids, ","))
		}
		results[claim.UID] = prepared
	}
	return results, nil
}

func (d *draDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := map[types.UID]error{}
	for _, claim := range claims {
		err := os.Remove(d.cdiSpecPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		results[claim.UID] = err
		log.Printf("unprepared claim %s", claim.String())
	}
	return results, nil
}

func (d *draDriver) HandleError(_ context.Context, err error, message string) {
	log.Printf("DRA: %s: %v", message, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel(fmt.Errorf("%s: %w", message, err))
	}
}

// startDRA registers the DRA half with the kubelet and publishes the node's ResourceSlice.
func startDRA(ctx context.Context, cancel context.CancelCauseFunc, settings draSettings, ids []string, gpu identity) (*kubeletplugin.Helper, error) {
	config, err := clientcmd.BuildConfigFromFlags("", settings.kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	for _, directory := range []string{settings.pluginDir, settings.cdiDir} {
		if err := os.MkdirAll(directory, 0o750); err != nil {
			return nil, err
		}
	}
	driver := &draDriver{settings: settings, gpu: gpu, ids: map[string]string{}, cancel: cancel}
	for index, id := range ids {
		driver.ids[fmt.Sprintf("gpu-%d", index)] = id
	}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(draDriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(settings.node),
		kubeletplugin.RegistrarDirectoryPath(settings.registryDir),
		// Short, as the device plugin's: the registry's path is long already.
		kubeletplugin.RegistrarSocketFilename("dra.sock"),
		kubeletplugin.PluginDataDirectoryPath(settings.pluginDir),
	)
	if err != nil {
		return nil, err
	}
	slice := resourceslice.Slice{Devices: draDevices(ids, gpu)}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{settings.node: {Slices: []resourceslice.Slice{slice}}}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		helper.Stop()
		return nil, err
	}
	log.Printf("DRA driver %s: published %d device(s) in pool %s", draDriverName, len(ids), settings.node)
	return helper, nil
}
