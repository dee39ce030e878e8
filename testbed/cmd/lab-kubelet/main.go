// Command lab-kubelet is test tooling for the lab (testbed/lab): the "hardware" and
// container runtime of an emulated EC2 instance, which no real machine here can give.
//
//	lab-kubelet [kubelet flags]   a kubelet: kubemark's hollow kubelet (k8s.io/kubernetes
//	                              pkg/kubemark), started from the real kubelet's command line
//	lab-kubelet containerd        a CRI server on /run/containerd/containerd.sock (the fake
//	                              runtime from k8s.io/cri-client), standing in for containerd
//
// The hollow kubelet does the real TLS bootstrap (CSR, approval, signing), registers the
// Node with the flags it was given (provider ID, labels, taints, --cloud-provider=external
// and so the uninitialized taint), heartbeats, and runs pods on the fake runtime. What it
// cannot do, this wrapper adds, each a stand-in that says so:
//   - capacity: CPU and memory of the instance type (from /etc/kk-lab/hardware.json, which
//     the node runner writes from moto's DescribeInstanceTypes), not the host's;
//   - health on 127.0.0.1:10248, which `kubeadm join` waits for;
//   - GPUs: NVML cannot run here, so a GPU instance advertises nvidia.com/gpu only while a
//     device-plugin container (image k8s-device-plugin) runs on the node AND the fake
//     containerd runs with nvidia as its default runtime, as the real plugin needs; times
//     the time-slicing replicas of the plugin's config, as the plugin advertises them;
//   - EFA: no EFA hardware (nor its kernel driver, /dev/infiniband) can exist here, so an
//     instance launched with EFA interfaces (the node runner counts them from moto's
//     DescribeInstances into hardware.json) advertises vpc.amazonaws.com/efa, one per
//     interface, only while the AWS EFA device-plugin container (image
//     aws-efa-k8s-device-plugin) runs on the node, as the real plugin registers them.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/version"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	criutil "k8s.io/cri-client/pkg/util"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"
	utilflag "k8s.io/kubernetes/pkg/util/flag"
	"sigs.k8s.io/yaml"
)

const (
	defaultSocket  = "/run/containerd/containerd.sock"
	runtimeState   = "/run/containerd/kk-lab-default-runtime"
	hardwareFile   = "/etc/kk-lab/hardware.json"
	devicePluginIm = "k8s-device-plugin"
	gpuResource    = "nvidia.com/gpu"
	// The label the GPU Operator's config manager reads a node's device-plugin config from.
	deviceConfigLabel = "nvidia.com/device-plugin.config"
	efaPluginIm       = "aws-efa-k8s-device-plugin"
	efaResource       = "vpc.amazonaws.com/efa"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "containerd" {
		if err := runContainerd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "lab-kubelet containerd:", err)
			os.Exit(1)
		}
		return
	}
	if err := runKubelet(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lab-kubelet:", err)
		os.Exit(1)
	}
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// runContainerd serves the fake CRI and records which default runtime this containerd
// started with: like the real one, it reads its config only at start, so a config
// changed later (nvidia-ctk runtime configure) takes effect only after a restart.
func runContainerd(args []string) error {
	fs := pflag.NewFlagSet("containerd", pflag.ContinueOnError)
	address := fs.String("address", defaultSocket, "CRI socket path")
	config := fs.String("config", "/etc/containerd/config.toml", "containerd config")
	if err := fs.Parse(args); err != nil {
		return err
	}
	active := defaultRuntime(*config)
	if err := os.MkdirAll("/run/containerd", 0o755); err != nil {
		return err
	}
	_ = os.Remove(*address)
	if err := os.WriteFile(runtimeState, []byte(active+"\n"), 0o644); err != nil {
		return err
	}
	rt := fakeremote.NewFakeRemoteRuntime()
	// The kubelet refuses images without a size ("Id or size of image is not set"); every
	// image "pulled" here gets one.
	rt.ImageService.SetFakeImageSize(64 << 20)
	rt.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	// Served by hand (not rt.Start) so that Status can answer as containerd does.
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, &containerd{RemoteRuntime: rt, defaultRuntime: active})
	kubeapi.RegisterImageServiceServer(server, rt)
	listener, err := criutil.CreateListener("unix://" + *address)
	if err != nil {
		return err
	}
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()
	klog.Infof("fake containerd on %s, default runtime %q", *address, active)
	ctx, cancel := signalContext()
	defer cancel()
	<-ctx.Done()
	return nil
}

// containerd is the fake runtime answering Status like containerd's CRI plugin: with
// verbose, its config (as `crictl info` prints it), where defaultRuntimeName is the runtime
// this containerd started with.
type containerd struct {
	*fakeremote.RemoteRuntime
	defaultRuntime string
}

func (c *containerd) Status(ctx context.Context, req *kubeapi.StatusRequest) (*kubeapi.StatusResponse, error) {
	resp, err := c.RemoteRuntime.Status(ctx, req)
	if err != nil || !req.Verbose {
		return resp, err
	}
	config, _ := json.Marshal(map[string]any{"containerd": map[string]string{"defaultRuntimeName": c.defaultRuntime}})
	resp.Info = map[string]string{"config": string(config)}
	return resp, nil
}

// defaultRuntime reads default_runtime_name from a containerd TOML config ("runc" when
// unset), the one setting `nvidia-ctk runtime configure --set-as-default` changes.
func defaultRuntime(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "runc"
	}
	for _, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.TrimSpace(key) == "default_runtime_name" {
			return strings.Trim(strings.TrimSpace(value), `"'`)
		}
	}
	return "runc"
}

type hardware struct {
	InstanceType string `json:"instanceType"`
	CPU          int    `json:"cpu"`
	MemoryMiB    uint64 `json:"memoryMiB"`
	GPUs         int    `json:"gpus"`
	EFA          int    `json:"efa"`
}

// machine reports the instance type's cores and memory instead of cadvisor's fixed fake.
type machine struct {
	cadvisortest.Fake
	hw hardware
}

func (m *machine) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	info, err := m.Fake.MachineInfo()
	if err != nil {
		return nil, err
	}
	info.NumCores = m.hw.CPU
	info.MemoryCapacity = m.hw.MemoryMiB * 1024 * 1024
	return info, nil
}

type kubeletArgs struct {
	showVersion         bool
	bootstrapKubeconfig string
	kubeconfig          string
	config              string
	certDir             string
	hostnameOverride    string
	providerID          string
	cloudProvider       string
	runtimeEndpoint     string
	maxPods             int
	nodeLabels          map[string]string
	taints              []v1.Taint
}

func parseKubeletArgs(args []string) (*kubeletArgs, error) {
	a := &kubeletArgs{nodeLabels: map[string]string{}}
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	// The real kubelet has about a hundred flags; this one honours those that decide
	// who the node is and how it registers, and ignores (and logs) the rest.
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.BoolVar(&a.showVersion, "version", false, "print the version")
	fs.StringVar(&a.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "")
	fs.StringVar(&a.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&a.config, "config", "", "")
	fs.StringVar(&a.certDir, "cert-dir", "/var/lib/kubelet/pki", "")
	fs.StringVar(&a.hostnameOverride, "hostname-override", "", "")
	fs.StringVar(&a.providerID, "provider-id", "", "")
	fs.StringVar(&a.cloudProvider, "cloud-provider", "", "")
	fs.StringVar(&a.runtimeEndpoint, "container-runtime-endpoint", "", "")
	fs.IntVar(&a.maxPods, "max-pods", 0, "")
	labels := cliflag.ConfigurationMap(a.nodeLabels)
	fs.Var(&labels, "node-labels", "")
	fs.Var(utilflag.RegisterWithTaintsVar{Value: &a.taints}, "register-with-taints", "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	klog.Infof("kubelet args: %q", args)
	return a, nil
}

// fileConfig is the part of kubeadm's /var/lib/kubelet/config.yaml the node uses.
func fileConfig(path string) (*kubeletv1beta1.KubeletConfiguration, error) {
	c := &kubeletv1beta1.KubeletConfiguration{}
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func readHardware() (hardware, error) {
	hw := hardware{CPU: 2, MemoryMiB: 8192}
	data, err := os.ReadFile(hardwareFile)
	if err != nil {
		return hw, fmt.Errorf("the node runner writes %s: %w", hardwareFile, err)
	}
	return hw, json.Unmarshal(data, &hw)
}

func runKubelet(args []string) error {
	a, err := parseKubeletArgs(args)
	if err != nil {
		return err
	}
	if a.showVersion {
		fmt.Printf("Kubernetes %s\n", version.Get().GitVersion)
		return nil
	}
	if a.kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	fc, err := fileConfig(a.config)
	if err != nil {
		return err
	}
	hw, err := readHardware()
	if err != nil {
		return err
	}
	nodeName := a.hostnameOverride
	if nodeName == "" {
		if nodeName, err = os.Hostname(); err != nil {
			return err
		}
	}
	nodeName = strings.ToLower(nodeName)
	ctx, cancel := signalContext()
	defer cancel()

	go serveHealth(ctx)

	if a.bootstrapKubeconfig != "" {
		if err := bootstrap.LoadClientCert(ctx, a.kubeconfig, a.bootstrapKubeconfig, a.certDir, types.NodeName(nodeName)); err != nil {
			return fmt.Errorf("TLS bootstrap: %w", err)
		}
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		return err
	}
	restConfig.UserAgent = "lab-kubelet"
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	heartbeat := *restConfig
	heartbeat.Timeout = 10 * time.Second
	heartbeat.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeat)
	if err != nil {
		return err
	}

	maxPods := a.maxPods
	if maxPods == 0 && fc.MaxPods > 0 {
		maxPods = int(fc.MaxPods)
	}
	if maxPods == 0 {
		maxPods = 110
	}
	taints := append([]v1.Taint{}, fc.RegisterWithTaints...)
	taints = append(taints, a.taints...)
	f, c := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName:            nodeName,
		KubeletPort:         10250,
		KubeletReadOnlyPort: 0,
		MaxPods:             maxPods,
		NodeLabels:          a.nodeLabels,
		RegisterWithTaints:  taints,
	})
	f.CloudProvider = a.cloudProvider
	c.ProviderID = a.providerID
	if c.ProviderID == "" {
		c.ProviderID = fc.ProviderID
	}
	endpoint := a.runtimeEndpoint
	if endpoint == "" {
		endpoint = fc.ContainerRuntimeEndpoint
	}
	if endpoint == "" {
		endpoint = "unix://" + defaultSocket
	}
	c.ContainerRuntimeEndpoint = endpoint
	c.ImageServiceEndpoint = endpoint
	c.ClusterDNS = fc.ClusterDNS
	c.ClusterDomain = fc.ClusterDomain

	runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return fmt.Errorf("container runtime at %s: %w", endpoint, err)
	}
	imageService, err := remote.NewRemoteImageService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return fmt.Errorf("image service at %s: %w", endpoint, err)
	}
	if hw.GPUs > 0 {
		go advertiseGPUs(ctx, client, nodeName, hw.GPUs)
	}
	if hw.EFA > 0 {
		go advertiseEFA(ctx, client, nodeName, hw.EFA)
	}
	klog.Infof("hollow kubelet %s: %s, %d CPU, %d MiB, %d GPU, %d EFA, provider ID %q", nodeName, hw.InstanceType, hw.CPU, hw.MemoryMiB, hw.GPUs, hw.EFA, c.ProviderID)
	hk := kubemark.NewHollowKubelet(f, c, client, heartbeatClient, &machine{Fake: cadvisortest.Fake{NodeName: nodeName}, hw: hw},
		imageService, runtimeService, cm.NewStubContainerManager())
	hk.Run(ctx)
	return nil
}

func serveHealth(ctx context.Context) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: "127.0.0.1:10248", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		klog.Errorf("healthz: %v", err)
	}
}

// advertiseGPUs stands in for NVML plus the device plugin's registration with the kubelet:
// once a device-plugin container runs on this node and containerd's active default runtime
// is nvidia, the node's status gains nvidia.com/gpu (and keeps it): the GPUs times the
// time-slicing replicas of the plugin's config. Without either it never does, which is what
// a real node shows when the plugin cannot reach the GPUs.
func advertiseGPUs(ctx context.Context, client clientset.Interface, nodeName string, count int) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if _, ok := node.Status.Capacity[gpuResource]; ok {
			continue
		}
		plugin := pluginPod(ctx, client, nodeName, devicePluginIm)
		if plugin == nil {
			continue
		}
		active, _ := os.ReadFile(runtimeState)
		if strings.TrimSpace(string(active)) != "nvidia" {
			klog.Warningf("device plugin running but containerd's default runtime is %q: no GPUs visible", strings.TrimSpace(string(active)))
			continue
		}
		advertise(ctx, client, nodeName, gpuResource, count*sharingReplicas(ctx, client, node, plugin))
	}
}

// sharingReplicas is the nvidia.com/gpu time-slicing replicas of the device plugin's config
// (1 without sharing). The config is a key of a ConfigMap the plugin's pod mounts: the key the
// node's nvidia.com/device-plugin.config label names (the GPU Operator's config manager picks
// it so), else the file its --config-file flag names (the bare plugin).
func sharingReplicas(ctx context.Context, client clientset.Interface, node *v1.Node, plugin *v1.Pod) int {
	key := node.Labels[deviceConfigLabel]
	if key == "" {
		for _, c := range plugin.Spec.Containers {
			for _, arg := range c.Args {
				if file, ok := strings.CutPrefix(arg, "--config-file="); ok {
					key = file[strings.LastIndex(file, "/")+1:]
				}
			}
		}
	}
	if key == "" {
		return 1
	}
	for _, volume := range plugin.Spec.Volumes {
		if volume.ConfigMap == nil {
			continue
		}
		configs, err := client.CoreV1().ConfigMaps(plugin.Namespace).Get(ctx, volume.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		text, ok := configs.Data[key]
		if !ok {
			continue
		}
		var config struct {
			Sharing struct {
				TimeSlicing struct {
					Resources []struct {
						Name     string `json:"name"`
						Replicas int    `json:"replicas"`
					} `json:"resources"`
				} `json:"timeSlicing"`
			} `json:"sharing"`
		}
		if err := yaml.Unmarshal([]byte(text), &config); err != nil {
			klog.Warningf("device plugin config %s/%s %q: %v", plugin.Namespace, volume.ConfigMap.Name, key, err)
			return 1
		}
		for _, r := range config.Sharing.TimeSlicing.Resources {
			if r.Name == gpuResource && r.Replicas > 1 {
				return r.Replicas
			}
		}
		return 1
	}
	klog.Warningf("device plugin config %q is in no ConfigMap the plugin mounts: no sharing", key)
	return 1
}

// advertiseEFA stands in for the EFA kernel driver plus the AWS EFA device plugin's
// registration with the kubelet: once the plugin's container runs on this node, the node's
// status gains vpc.amazonaws.com/efa, one per EFA interface the instance was launched with
// (and keeps it). Without the plugin it never does, as on a real node.
func advertiseEFA(ctx context.Context, client clientset.Interface, nodeName string, count int) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if q, ok := node.Status.Capacity[efaResource]; ok && q.Value() == int64(count) {
			continue
		}
		if pluginPod(ctx, client, nodeName, efaPluginIm) == nil {
			continue
		}
		advertise(ctx, client, nodeName, efaResource, count)
	}
}

// advertise puts an extended resource into the node's capacity and allocatable, as the
// kubelet does for a device plugin's devices.
func advertise(ctx context.Context, client clientset.Interface, nodeName, name string, count int) {
	q := resource.NewQuantity(int64(count), resource.DecimalSI).String()
	patch := fmt.Sprintf(`{"status":{"capacity":{%q:%q},"allocatable":{%q:%q}}}`, name, q, name, q)
	if _, err := client.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		klog.Warningf("advertising %s: %v", name, err)
		return
	}
	klog.Infof("advertised %s=%s", name, q)
}

// pluginPod is a running pod on the node with a container of the image named `image` (the
// last path element of its repository, whatever the registry or tag:
// aws-efa-k8s-device-plugin is not k8s-device-plugin), or nil.
func pluginPod(ctx context.Context, client clientset.Interface, nodeName, image string) *v1.Pod {
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return nil
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != v1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			if imageName(c.Image) == image {
				return p
			}
		}
	}
	return nil
}

// imageName is an image reference's repository without registry and path, tag or digest.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	name := ref[strings.LastIndex(ref, "/")+1:]
	name, _, _ = strings.Cut(name, ":")
	return name
}
