// Command fake-gpu is the local cluster's double of NVIDIA's device plugin: one per real node, it registers
// the extended resource nvidia.com/gpu with the node's kubelet (device plugin API v1beta1), advertises
// --gpus healthy devices, and on Allocate hands the container what the NVIDIA container toolkit would
// expose on a GPU node: NVIDIA_VISIBLE_DEVICES (the allocated devices' IDs, comma-separated) and, standing
// for the devices the driver would show inside the container, FAKE_NVIDIA_GPUS (one
// `<product name>,<major>.<minor>` per allocated GPU, ';'-separated), which the images' nvidia-smi double
// reads. No device node, mount or driver reaches the container: this machine has no GPU.
//
// It registers through the kubelet's plugin watcher (a socket in `<kubelet root>/plugins_registry` serving
// the plugin registration API, type DevicePlugin), not through `/var/lib/kubelet/device-plugins/kubelet.sock`:
// the kubelet takes that path as a constant, whatever its --root-dir, so every kubelet on this machine
// would share it. The watcher finds the socket again when the kubelet restarts and registers it anew; the
// plugin only has to keep its socket, which it serves again if it is removed. Its health endpoint
// (--health-address, /healthz) answers 200 while a kubelet watches its devices, 503 before and between.
//
// Usage:
//
//	fake-gpu --registry-dir <kubelet root>/plugins_registry --node <name> --gpus 8 \
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
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	visibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
	fakeGpusEnv       = "FAKE_NVIDIA_GPUS"
	// How often the plugin looks whether its socket is still there.
	watchInterval = 500 * time.Millisecond
)

// identity is what one fake GPU of this node is, as nvidia-smi would name it.
type identity struct {
	productName       string
	computeCapability string
}

// deviceIDs are the node's GPU IDs in the form of NVIDIA's (GPU-<uuid>), made of `seed`: stable across
// restarts of the plugin (the kubelet's checkpoint names allocated devices by ID), distinct across nodes
// and clusters. Every kubelet on this machine keeps its device checkpoint in the one
// /var/lib/kubelet/device-plugins, so a restarted kubelet may read another's: with IDs of its own, the
// other's allocations hold none of its devices.
func deviceIDs(seed string, count int) []string {
	ids := make([]string, count)
	for index := range ids {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, index)))
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
	// How many ListAndWatch streams are open: a kubelet has the devices while there is one.
	watchers *atomic.Int32
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
	p.watchers.Add(1)
	defer p.watchers.Add(-1)
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

// registration answers the kubelet's plugin watcher: a device plugin for `resource` at `endpoint`.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	resource string
	endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.DevicePlugin,
		Name:              r.resource,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{pluginapi.Version},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if status.PluginRegistered {
		log.Printf("registered %s with the kubelet", r.resource)
	} else {
		log.Printf("the kubelet refused %s: %s", r.resource, status.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serve listens on `socket` and serves the registration and device plugin APIs until stop is called.
func serve(socket, resource string, template *plugin) (stop func(), err error) {
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
	registerapi.RegisterRegistrationServer(server, &registration{resource: resource, endpoint: socket})
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

// serveHealth answers /healthz: 200 while a kubelet watches the devices, else 503.
func serveHealth(address string, watchers *atomic.Int32) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(writer http.ResponseWriter, _ *http.Request) {
		if watchers.Load() > 0 {
			_, _ = writer.Write([]byte("ok"))
			return
		}
		http.Error(writer, "no kubelet watches the devices", http.StatusServiceUnavailable)
	})
	server := &http.Server{Addr: address, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(server.ListenAndServe())
}

func main() {
	registryDir := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin watcher directory")
	node := flag.String("node", "", "the node's name")
	idSeed := flag.String("id-seed", "", "what makes the device IDs unique on this machine (default: --node)")
	gpus := flag.Int("gpus", 8, "how many GPUs to advertise")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource's name")
	productName := flag.String("product-name", "", "each GPU's name as nvidia-smi prints it")
	computeCapability := flag.String("compute-capability", "", "each GPU's compute capability, <major>.<minor>")
	// Short: the registry's path is long already, and a unix socket's path has at most 107 bytes.
	socketName := flag.String("socket-name", "gpu.sock", "the plugin's socket in --registry-dir")
	healthAddress := flag.String("health-address", "", "host:port of /healthz (none when empty)")
	flag.Parse()
	if *node == "" || *productName == "" || *computeCapability == "" || *gpus < 0 {
		log.Fatal("--node, --product-name, --compute-capability and --gpus (0 or more) are required")
	}
	if *idSeed == "" {
		*idSeed = *node
	}
	ids := deviceIDs(*idSeed, *gpus)
	template := &plugin{
		ids:      ids,
		gpu:      identity{*productName, *computeCapability},
		known:    map[string]bool{},
		watchers: &atomic.Int32{},
	}
	for _, id := range ids {
		template.known[id] = true
	}
	if err := os.MkdirAll(*registryDir, 0o750); err != nil {
		log.Fatalf("creating %s: %v", *registryDir, err)
	}
	socket := filepath.Join(*registryDir, *socketName)
	log.Printf("%s: %d x %s (compute capability %s) as %s, at %s", *node, *gpus, *productName, *computeCapability, *resource, socket)

	if *healthAddress != "" {
		go serveHealth(*healthAddress, template.watchers)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	ticker := time.NewTicker(watchInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		stop, err := serve(socket, *resource, template)
		if err != nil {
			log.Fatalf("listening on %s: %v", socket, err)
		}
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-ticker.C:
			}
			if _, err := os.Stat(socket); err != nil {
				log.Printf("%s is gone; serving it again", socket)
				break
			}
		}
		stop()
	}
	log.Printf("stopped")
}
