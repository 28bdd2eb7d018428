// Command fake-gpu is the local cluster's double of NVIDIA's device plugin: one per real node, it registers
// the extended resource nvidia.com/gpu with the node's kubelet (device plugin API v1beta1), advertises
// --gpus healthy devices, and on Allocate hands the container what the NVIDIA container toolkit would
// expose on a GPU node: NVIDIA_VISIBLE_DEVICES (the allocated devices' IDs, comma-separated) and, standing
// for the devices the driver would show inside the container, FAKE_NVIDIA_GPUS (one
// `<product name>,<major>.<minor>` per allocated GPU, ';'-separated), which the images' nvidia-smi double
// reads. No device node, mount or driver reaches the container: this machine has no GPU.
//
// The kubelet forgets every plugin when it restarts (it deletes the sockets in its device-plugins
// directory and makes a new kubelet.sock); the plugin notices either and serves and registers again, as
// the real plugin does.
//
// Usage:
//
//	fake-gpu --plugin-dir <kubelet root>/device-plugins --node <name> --gpus 8 \
//	    --product-name "NVIDIA H100 80GB HBM3" --compute-capability 9.0
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	visibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
	fakeGpusEnv       = "FAKE_NVIDIA_GPUS"
	// How often the plugin looks whether the kubelet restarted (its own socket gone, a new kubelet.sock).
	watchInterval = 500 * time.Millisecond
)

// identity is what one fake GPU of this node is, as nvidia-smi would name it.
type identity struct {
	productName       string
	computeCapability string
}

// deviceIDs are the node's GPU IDs in the form of NVIDIA's (GPU-<uuid>), stable across restarts of the
// plugin (the kubelet's checkpoint names allocated devices by ID) and distinct across nodes.
func deviceIDs(node string, count int) []string {
	ids := make([]string, count)
	for index := range ids {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", node, index)))
		hex := fmt.Sprintf("%x", sum[:16])
		ids[index] = fmt.Sprintf("GPU-%s-%s-%s-%s-%s", hex[0:8], hex[8:12], hex[12:16], hex[16:20], hex[20:32])
	}
	return ids
}

// containerEnvs is what a container given the devices `ids` sees of them.
func containerEnvs(ids []string, gpu identity) map[string]string {
	lines := make([]string, len(ids))
	for index := range ids {
		lines[index] = gpu.productName + "," + gpu.computeCapability
	}
	return map[string]string{
		visibleDevicesEnv: strings.Join(ids, ","),
		fakeGpusEnv:       strings.Join(lines, ";"),
	}
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ids   []string
	gpu   identity
	known map[string]bool
	// Closed when this server stops, which ends ListAndWatch's stream.
	stopped chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devices := make([]*pluginapi.Device, len(p.ids))
	for index, id := range p.ids {
		devices[index] = &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	log.Printf("advertised %d healthy device(s)", len(devices))
	// The devices never change; the stream stays open until the kubelet or this server goes.
	select {
	case <-stream.Context().Done():
	case <-p.stopped:
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		for _, id := range container.DevicesIds {
			if !p.known[id] {
				return nil, fmt.Errorf("no such device %q on this node", id)
			}
		}
		envs := containerEnvs(container.DevicesIds, p.gpu)
		log.Printf("allocated %s", envs[visibleDevicesEnv])
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs})
	}
	return response, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve listens on `socket` and serves a fresh plugin until stop is called.
func serve(socket string, template *plugin) (stop func(), err error) {
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	served := *template
	served.stopped = make(chan struct{})
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, &served)
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Printf("serving %s: %v", socket, err)
		}
	}()
	return func() {
		close(served.stopped)
		server.Stop()
		_ = os.Remove(socket)
	}, nil
}

func register(ctx context.Context, kubeletSocket, endpoint, resource string) error {
	connection, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer connection.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(connection).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

// sameFile tells whether `path` is still the file `before` was (false when either is missing).
func sameFile(before os.FileInfo, path string) bool {
	now, err := os.Stat(path)
	return err == nil && before != nil && os.SameFile(before, now)
}

func main() {
	pluginDir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	node := flag.String("node", "", "the node's name (makes the device IDs)")
	gpus := flag.Int("gpus", 8, "how many GPUs to advertise")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource's name")
	productName := flag.String("product-name", "", "each GPU's name as nvidia-smi prints it")
	computeCapability := flag.String("compute-capability", "", "each GPU's compute capability, <major>.<minor>")
	socketName := flag.String("socket-name", "fake-nvidia-gpu.sock", "the plugin's socket in --plugin-dir")
	flag.Parse()
	if *node == "" || *productName == "" || *computeCapability == "" || *gpus < 0 {
		log.Fatal("--node, --product-name, --compute-capability and --gpus (0 or more) are required")
	}
	ids := deviceIDs(*node, *gpus)
	template := &plugin{ids: ids, gpu: identity{*productName, *computeCapability}, known: map[string]bool{}}
	for _, id := range ids {
		template.known[id] = true
	}
	socket := filepath.Join(*pluginDir, *socketName)
	kubeletSocket := filepath.Join(*pluginDir, filepath.Base(pluginapi.KubeletSocket))
	log.Printf("%s: %d x %s (compute capability %s) as %s", *node, *gpus, *productName, *computeCapability, *resource)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	ticker := time.NewTicker(watchInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		kubeletBefore, err := os.Stat(kubeletSocket)
		if err != nil {
			// No kubelet yet (or one starting): look again soon.
			select {
			case <-ctx.Done():
			case <-ticker.C:
			}
			continue
		}
		stop, err := serve(socket, template)
		if err != nil {
			log.Fatalf("listening on %s: %v", socket, err)
		}
		if err := register(ctx, kubeletSocket, *socketName, *resource); err != nil {
			log.Printf("registering with the kubelet at %s: %v; trying again", kubeletSocket, err)
			stop()
			select {
			case <-ctx.Done():
			case <-ticker.C:
			}
			continue
		}
		log.Printf("registered %s with the kubelet at %s", *resource, kubeletSocket)
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-ticker.C:
			}
			if _, err := os.Stat(socket); err != nil || !sameFile(kubeletBefore, kubeletSocket) {
				log.Printf("the kubelet restarted (its socket is new or ours is gone); registering again")
				break
			}
		}
		stop()
	}
	log.Printf("stopped")
}
