package main

// Karpenter's scheduling benchmark shapes, mirrored from
// pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go at
// v1.15.0: 400 instance types from fake.InstanceTypes(400), one NodePool
// with huge limits, and makeDiversePods(n): n/5 each of generic pods, zone
// topology spread, hostname topology spread, zone self-affinity and
// hostname anti-affinity, the remainder generic. The inputs are built as a
// Scenario, so `bench --emit` writes exactly what `bench` solves.

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
)

func cmdBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	sizes := fs.String("sizes", "100,1000,5000,20000", "pod counts")
	emit := fs.String("emit", "", "write the benchmark scenarios to this directory instead of solving them")
	cpu := fs.Int64("cpu-requests", 5000, "controller CPU requests (millicores); 5000 = NumConcurrentReconciles(5) as upstream's benchmark")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the solves to this file")
	if rest := parseInterleaved(fs, args); len(rest) > 0 {
		return fmt.Errorf("bench: unexpected arguments %v", rest)
	}
	var counts []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("bad size %q", s)
		}
		counts = append(counts, n)
	}
	if *emit != "" {
		if err := os.MkdirAll(*emit, 0o755); err != nil {
			return err
		}
		for _, n := range counts {
			sc := benchScenario(n)
			path := filepath.Join(*emit, sc.Name+".json")
			if err := os.WriteFile(path, scenarioJSON(sc), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "karpenter-oracle: wrote %s\n", path)
		}
		return nil
	}
	cfg := RunConfig{CPURequests: *cpu, SolveTimeout: 0}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("%8s %10s %8s %10s %8s %14s\n", "pods", "nodeclaims", "pending", "seconds", "pods/s", "setup+solve s")
	for _, n := range counts {
		sc := benchScenario(n)
		start := time.Now()
		out, solve, err := solveOnce(sc, cfg)
		if err != nil {
			return err
		}
		total := time.Since(start)
		fmt.Printf("%8d %10d %8d %10.3f %8.0f %14.3f\n", n, len(out.NodeClaims), len(out.Pending),
			solve.Seconds(), float64(n)/solve.Seconds(), total.Seconds())
	}
	fmt.Fprintf(os.Stderr, "(seconds = Scheduler.Solve wall time, as the upstream benchmark times it; 400 instance types, NumConcurrentReconciles(%d))\n",
		int((*cpu+999)/1000))
	return nil
}

// benchScenario builds the upstream benchmark's inputs for `count` pods.
func benchScenario(count int) *Scenario {
	sc := &Scenario{
		Name:        fmt.Sprintf("bench-%d", count),
		Description: fmt.Sprintf("Karpenter v1.15.0 scheduling benchmark shape: fake.InstanceTypes(400), makeDiversePods(%d)", count),
		Tags:        []string{"benchmark"},
	}
	np := newPool("default")
	np.Spec.Limits = karpv1.Limits{
		corev1.ResourceCPU:    resource.MustParse("10000000"),
		corev1.ResourceMemory: resource.MustParse("10000000Gi"),
	}
	sc.NodePools = []karpv1.NodePool{*np}
	for _, it := range fake.InstanceTypes(400) {
		sc.InstanceTypes = append(sc.InstanceTypes, instanceTypeToSpec(it))
	}
	b := &benchPods{r: rand.New(rand.NewSource(42)), created: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	sc.Pods = b.makeDiversePods(count)
	return sc
}

// instanceTypeToSpec writes a cloudprovider.InstanceType in the scenario
// format: single-valued In requirements become labels, everything else
// (e.g. the fake's multi-valued kubernetes.io/os) becomes requirements;
// name, zone and capacity type are left to be derived again.
func instanceTypeToSpec(it *cloudprovider.InstanceType) InstanceTypeSpec {
	spec := InstanceTypeSpec{Name: it.Name, Labels: map[string]string{}, Capacity: it.Capacity.DeepCopy()}
	derived := sets.New(corev1.LabelInstanceTypeStable, corev1.LabelTopologyZone, karpv1.CapacityTypeLabelKey)
	keys := it.Requirements.Keys().UnsortedList()
	sort.Strings(keys)
	for _, k := range keys {
		if derived.Has(k) {
			continue
		}
		r := it.Requirements.Get(k)
		vals := r.Values()
		sort.Strings(vals)
		if r.Operator() == corev1.NodeSelectorOpIn && len(vals) == 1 {
			spec.Labels[k] = vals[0]
			continue
		}
		nsr := corev1.NodeSelectorRequirement{Key: k, Operator: r.Operator()}
		if r.Operator() == corev1.NodeSelectorOpIn || r.Operator() == corev1.NodeSelectorOpNotIn {
			nsr.Values = vals
		}
		spec.Requirements = append(spec.Requirements, nsr)
	}
	if it.Overhead != nil {
		spec.Overhead = &OverheadSpec{
			KubeReserved:      it.Overhead.KubeReserved.DeepCopy(),
			SystemReserved:    it.Overhead.SystemReserved.DeepCopy(),
			EvictionThreshold: it.Overhead.EvictionThreshold.DeepCopy(),
		}
	}
	for _, o := range it.Offerings {
		os := OfferingSpec{Zone: o.Zone(), CapacityType: o.CapacityType(), Price: o.Price}
		if !o.Available {
			os.Available = ptr(false)
		}
		spec.Offerings = append(spec.Offerings, os)
	}
	return spec
}

// benchPods mirrors the pod builders of scheduling_benchmark_test.go,
// drawing from a rand.New(rand.NewSource(42)) in the same order. (Upstream
// shares one source across all benchmark sizes of a `go test` run; here
// every size starts from seed 42.) Pods get fixed creation times and
// UIDs in construction order instead of metav1.Now() and random UUIDs, so
// Karpenter's queue order (CPU, memory, creation time, UID) is the
// construction order among equals, as upstream's nanosecond timestamps make it.
type benchPods struct {
	r       *rand.Rand
	seq     int
	created time.Time
}

func (b *benchPods) randomLabelValue() string {
	labelValues := []string{"a", "b", "c", "d", "e", "f", "g"}
	return labelValues[b.r.Intn(len(labelValues))]
}
func (b *benchPods) randomLabels() map[string]string {
	return map[string]string{"my-label": b.randomLabelValue()}
}
func (b *benchPods) randomAffinityLabels() map[string]string {
	return map[string]string{"my-affininity": b.randomLabelValue()}
}
func (b *benchPods) randomMemory() resource.Quantity {
	mem := []int{100, 256, 512, 1024, 2048, 4096}
	return resource.MustParse(fmt.Sprintf("%dMi", mem[b.r.Intn(len(mem))]))
}
func (b *benchPods) randomCPU() resource.Quantity {
	cpu := []int{100, 250, 500, 1000, 1500}
	return resource.MustParse(fmt.Sprintf("%dm", cpu[b.r.Intn(len(cpu))]))
}

func (b *benchPods) pod(kind string, labels map[string]string, cpu, mem resource.Quantity) corev1.Pod {
	p := corev1.Pod{}
	p.Name = fmt.Sprintf("%s-%06d", kind, b.seq)
	p.Namespace = "default"
	p.UID = types.UID(fmt.Sprintf("bench-%06d", b.seq))
	b.seq++
	p.CreationTimestamp = metav1.NewTime(b.created)
	p.Labels = labels
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "public.ecr.aws/eks-distro/kubernetes/pause:3.2",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}}}}
	return p
}

func (b *benchPods) makeDiversePods(count int) []corev1.Pod {
	var pods []corev1.Pod
	numTypes := 5
	pods = append(pods, b.makeGenericPods(count/numTypes)...)
	pods = append(pods, b.makeTopologySpreadPods(count/numTypes, corev1.LabelTopologyZone)...)
	pods = append(pods, b.makeTopologySpreadPods(count/numTypes, corev1.LabelHostname)...)
	pods = append(pods, b.makePodAffinityPods(count/numTypes, corev1.LabelTopologyZone)...)
	pods = append(pods, b.makePodAntiAffinityPods(count/numTypes, corev1.LabelHostname)...)
	nRemaining := count - len(pods)
	pods = append(pods, b.makeGenericPods(nRemaining)...)
	return pods
}

func (b *benchPods) makeGenericPods(count int) []corev1.Pod {
	var pods []corev1.Pod
	for i := 0; i < count; i++ {
		labels := b.randomLabels()
		cpu := b.randomCPU()
		mem := b.randomMemory()
		pods = append(pods, b.pod("generic", labels, cpu, mem))
	}
	return pods
}

func (b *benchPods) makeTopologySpreadPods(count int, key string) []corev1.Pod {
	var pods []corev1.Pod
	kind := "zone-spread"
	if key == corev1.LabelHostname {
		kind = "host-spread"
	}
	for i := 0; i < count; i++ {
		labels := b.randomLabels()
		selector := b.randomLabels()
		cpu := b.randomCPU()
		mem := b.randomMemory()
		p := b.pod(kind, labels, cpu, mem)
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       key,
			WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: selector},
		}}
		pods = append(pods, p)
	}
	return pods
}

func (b *benchPods) makePodAffinityPods(count int, key string) []corev1.Pod {
	var pods []corev1.Pod
	for i := 0; i < count; i++ {
		labels := b.randomAffinityLabels()
		cpu := b.randomCPU()
		mem := b.randomMemory()
		p := b.pod("zone-affinity", labels, cpu, mem)
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: copyMap(labels)},
				TopologyKey:   key,
			}},
		}}
		pods = append(pods, p)
	}
	return pods
}

func (b *benchPods) makePodAntiAffinityPods(count int, key string) []corev1.Pod {
	var pods []corev1.Pod
	for i := 0; i < count; i++ {
		labels := map[string]string{"app": "nginx"}
		cpu := b.randomCPU()
		mem := b.randomMemory()
		p := b.pod("host-anti-affinity", labels, cpu, mem)
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: copyMap(labels)},
				TopologyKey:   key,
			}},
		}}
		pods = append(pods, p)
	}
	return pods
}
