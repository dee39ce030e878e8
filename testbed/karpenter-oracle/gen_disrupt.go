package main

// Seeded generator of disruption scenarios: a cluster state (node pools with
// disruption settings, nodes with their NodeClaims and pods, PDBs) and a
// clock. Scenario i of seed S depends only on (S, i). Every NodePool gets
// explicit budgets, consolidateAfter and expireAfter (written even when
// "Never"), so that no side depends on CRD defaulting.

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/awslabs/operatorpkg/status"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

const (
	dfEmpty          = "empty-nodes"
	dfUnderutilized  = "underutilized"
	dfBudgets        = "budgets"
	dfDoNotDisrupt   = "do-not-disrupt"
	dfPDB            = "pdbs"
	dfSpot           = "spot"
	dfGPU            = "gpu"
	dfDrift          = "drift"
	dfBalanced       = "balanced"
	dfWhenEmpty      = "when-empty"
	dfConsolidateAft = "consolidate-after"
	dfPending        = "pending-pods"
)

var disruptFeatures = []string{dfEmpty, dfUnderutilized, dfBudgets, dfDoNotDisrupt, dfPDB, dfSpot, dfGPU,
	dfDrift, dfBalanced, dfWhenEmpty, dfConsolidateAft, dfPending}

// keepNever stops prunedJSON from dropping "Never" durations (disruption
// scenarios must say Never explicitly).
var keepNever bool

func cmdGenerateDisrupt(args []string) error {
	fs := flag.NewFlagSet("disrupt-generate", flag.ExitOnError)
	seed := fs.Int64("seed", 1, "seed")
	count := fs.Int("count", 300, "number of scenarios")
	nodes := fs.Int("nodes", 0, "nodes per scenario (0: 2-10, random)")
	out := fs.String("out", "", "output directory")
	if rest := parseInterleaved(fs, args); len(rest) > 0 {
		return fmt.Errorf("disrupt-generate: unexpected arguments %v", rest)
	}
	if *out == "" {
		return fmt.Errorf("disrupt-generate needs --out DIR")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	keepNever = true
	tags := map[string]int{}
	for i := 0; i < *count; i++ {
		sc := generateDisruptScenario(*seed, i, *nodes)
		for _, t := range sc.Tags {
			tags[t]++
		}
		if err := os.WriteFile(filepath.Join(*out, sc.Name+".json"), disruptScenarioJSON(sc), 0o644); err != nil {
			return err
		}
	}
	var parts []string
	for _, k := range sortedKeys(tags) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, tags[k]))
	}
	fmt.Fprintf(os.Stderr, "karpenter-oracle: wrote %d disruption scenarios to %s\n  tags: %s\n", *count, *out, strings.Join(parts, " "))
	return nil
}

func disruptScenarioJSON(sc *Scenario) []byte {
	var buf bytes.Buffer
	buf.Write(scenarioJSON(sc))
	// scenarioJSON ends with "]\n}\n": append pdbs and disruption.
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n}\n"))
	var out bytes.Buffer
	out.Write(b)
	out.WriteString(",\n\"pdbs\":[")
	for i, p := range sc.PDBs {
		if i > 0 {
			out.WriteString(",")
		}
		out.WriteString("\n ")
		out.Write(prunedJSON(p))
	}
	if len(sc.PDBs) > 0 {
		out.WriteString("\n")
	}
	out.WriteString("],\n\"disruption\":")
	out.Write(prunedJSON(sc.Disruption))
	out.WriteString("\n}\n")
	return out.Bytes()
}

// podsPerNode > 0 (the benchmark) puts that many pods on every node and keeps
// to instance types with room for them.
var podsPerNode int

func generateDisruptScenario(seed int64, idx int, nodes int) *Scenario {
	g := &gen{
		r:        rand.New(rand.NewSource(seed*1_000_033 + int64(idx)*104_729 + 5)),
		seed:     seed,
		idx:      idx,
		features: map[string]bool{},
		base:     time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC),
	}
	feat := map[string]bool{disruptFeatures[idx%len(disruptFeatures)]: true}
	for extra := 1 + g.pick(4); extra > 0; extra-- {
		feat[disruptFeatures[g.pick(len(disruptFeatures))]] = true
	}
	bench := podsPerNode > 0
	if bench {
		// the benchmark: underutilized nodes, default settings, nothing blocked
		feat = map[string]bool{dfUnderutilized: true}
	}
	g.zones = []string{"zone-a", "zone-b", "zone-c"}[:2+g.pick(2)]
	g.features[featGPU] = feat[dfGPU]
	g.instanceTypes()
	// the generator's own catalog entries, by name
	var general, gpuTypes []InstanceTypeSpec
	for _, s := range g.specs {
		if podsPerNode > 0 && s.Capacity.Pods().Value() <= int64(podsPerNode) {
			continue
		}
		if _, ok := s.Capacity["nvidia.com/gpu"]; ok {
			gpuTypes = append(gpuTypes, s)
		} else {
			general = append(general, s)
		}
	}
	sc := &Scenario{
		Name:          fmt.Sprintf("disrupt-s%d-%04d", seed, idx),
		InstanceTypes: g.specs,
		Disruption:    &DisruptionSpec{Now: metav1.NewTime(g.base), SpotToSpot: feat[dfSpot] && g.chance(0.5)},
	}

	type poolInfo struct {
		np    *karpv1.NodePool
		types []InstanceTypeSpec
		cts   []string
		gpu   bool
	}
	var pools []poolInfo
	mkPool := func(name string, types []InstanceTypeSpec, gpu bool) {
		np := newPool(name)
		names := make([]string, 0, len(types))
		for _, t := range types {
			names = append(names, t.Name)
		}
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements,
			req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, names...))
		cts := []string{"on-demand"}
		if feat[dfSpot] {
			cts = [][]string{{"spot"}, {"spot", "on-demand"}, {"on-demand"}}[g.pick(3)]
		}
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements,
			req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, cts...))
		if gpu {
			np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		}
		d := &np.Spec.Disruption
		switch {
		case feat[dfBalanced] && g.chance(0.6):
			d.ConsolidationPolicy = karpv1.ConsolidationPolicyBalanced
		case feat[dfWhenEmpty] && g.chance(0.6), gpu && g.chance(0.5):
			d.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
		default:
			d.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
		}
		after := "0s"
		if !bench && (feat[dfConsolidateAft] || g.chance(0.3)) {
			after = g.oneOf("30s", "10m", "2h", "Never", "0s")
		}
		if after == "Never" {
			d.ConsolidateAfter = karpv1.MustParseNillableDuration("Never")
		} else {
			d.ConsolidateAfter = karpv1.MustParseNillableDuration(after)
		}
		budgets := []karpv1.Budget{{Nodes: "10%"}}
		if !bench && (feat[dfBudgets] || g.chance(0.3)) {
			switch g.pick(8) {
			case 0:
				budgets = []karpv1.Budget{{Nodes: "1"}}
			case 1:
				budgets = []karpv1.Budget{{Nodes: "0"}}
			case 2:
				budgets = []karpv1.Budget{{Nodes: "100%"}}
			case 3:
				budgets = []karpv1.Budget{{Nodes: "50%"}}
			case 4:
				budgets = []karpv1.Budget{{Nodes: "2"}, {Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}}}
			case 5:
				budgets = []karpv1.Budget{{Nodes: "100%"}, {Nodes: "0", Schedule: ptr("0 12 * * *"), Duration: &metav1.Duration{Duration: time.Hour}}}
			case 6:
				budgets = []karpv1.Budget{{Nodes: "3"}, {Nodes: "0", Schedule: ptr("0 0 * * *"), Duration: &metav1.Duration{Duration: time.Hour}}}
			default:
				budgets = []karpv1.Budget{{Nodes: "1", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonEmpty}}, {Nodes: "100%"}}
			}
		}
		d.Budgets = budgets
		np.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never")
		pools = append(pools, poolInfo{np: np, types: types, cts: cts, gpu: gpu})
	}
	mkPool("default", general, false)
	if g.chance(0.4) {
		half := general[:1+g.pick(len(general))]
		mkPool("batch", half, false)
	}
	if feat[dfGPU] && len(gpuTypes) > 0 {
		mkPool("gpu", gpuTypes, true)
	}
	for _, p := range pools {
		sc.NodePools = append(sc.NodePools, *p.np)
	}

	n := nodes
	if n == 0 {
		n = 2 + g.pick(9)
	}
	apps := []string{"web", "api", "worker", "cache"}
	appsUsed := map[string]bool{}
	for i := 0; i < n; i++ {
		p := pools[g.pick(len(pools))]
		spec := p.types[g.pick(len(p.types))]
		// a zone and capacity type this type offers
		type zc struct{ zone, ct string }
		var offers []zc
		for _, o := range spec.Offerings {
			for _, ct := range p.cts {
				if o.CapacityType == ct {
					offers = append(offers, zc{o.Zone, o.CapacityType})
				}
			}
		}
		if len(offers) == 0 {
			offers = []zc{{spec.Offerings[0].Zone, spec.Offerings[0].CapacityType}}
		}
		off := offers[g.pick(len(offers))]
		name := fmt.Sprintf("node-%02d", i)
		cat := g.its[indexOf(g.its, spec.Name)]
		labels := map[string]string{
			corev1.LabelHostname:           name,
			corev1.LabelInstanceTypeStable: spec.Name,
			corev1.LabelTopologyZone:       off.zone,
			corev1.LabelArchStable:         cat.arch,
			corev1.LabelOSStable:           "linux",
			karpv1.CapacityTypeLabelKey:    off.ct,
			karpv1.NodePoolLabelKey:        p.np.Name,
			karpv1.NodeRegisteredLabelKey:  "true",
			karpv1.NodeInitializedLabelKey: "true",
		}
		node := &corev1.Node{}
		node.Name = name
		node.Labels = labels
		node.Spec.Taints = append([]corev1.Taint(nil), p.np.Spec.Template.Spec.Taints...)
		node.Spec.ProviderID = "fake:///" + off.zone + "/" + name
		node.Status.Capacity = spec.Capacity.DeepCopy()
		alloc := allocatableOf(spec)
		node.Status.Allocatable = alloc
		node.CreationTimestamp = metav1.NewTime(g.base.Add(-48 * time.Hour))
		ready := corev1.ConditionTrue
		if g.chance(0.03) {
			ready = corev1.ConditionFalse
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		if feat[dfDoNotDisrupt] && g.chance(0.15) {
			node.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
		}
		nc := &karpv1.NodeClaim{}
		nc.Name = "claim-" + name
		nc.Labels = copyMap(labels)
		nc.CreationTimestamp = node.CreationTimestamp
		nc.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{}
		nc.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never")
		nc.Status.ProviderID = node.Spec.ProviderID
		nc.Status.NodeName = name
		initAt := metav1.NewTime(g.base.Add(-47 * time.Hour))
		nc.Status.Conditions = append(nc.Status.Conditions,
			status.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, LastTransitionTime: initAt, Reason: "Initialized"})
		if feat[dfDrift] && g.chance(0.3) {
			nc.Status.Conditions = append(nc.Status.Conditions, status.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(g.base.Add(-time.Duration(1+g.pick(20)) * time.Hour)), Reason: "NodePoolDrifted"})
		}
		switch g.pick(4) {
		case 0:
			nc.Status.LastPodEventTime = metav1.NewTime(g.base.Add(-5 * time.Minute))
		case 1:
			nc.Status.LastPodEventTime = metav1.NewTime(g.base.Add(-90 * time.Minute))
		case 2:
			nc.Status.LastPodEventTime = metav1.NewTime(g.base.Add(-3 * time.Hour))
		}
		en := ExistingNodeSpec{Node: node, NodeClaim: nc}
		// pods: none (empty) or a few, small next to the node (underutilized)
		np := 0
		if !(feat[dfEmpty] && g.chance(0.5)) {
			np = 1 + g.pick(4)
		}
		if podsPerNode > 0 {
			np = podsPerNode
		}
		cpuAlloc := alloc.Cpu().MilliValue()
		for j := 0; j < np; j++ {
			app := apps[g.pick(len(apps))]
			appsUsed[app] = true
			pod := corev1.Pod{}
			pod.Name = fmt.Sprintf("%s-%s-%d", app, name, j)
			pod.Namespace = "default"
			pod.UID = types.UID(fmt.Sprintf("d%d-%d-p%03d", seed, idx, g.podSeq))
			g.podSeq++
			pod.Labels = map[string]string{"app": app}
			pod.CreationTimestamp = metav1.NewTime(g.base.Add(-24 * time.Hour))
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-rs", UID: types.UID(app + "-rs"), Controller: ptr(true)}}
			frac := []int64{5, 10, 20, 35}[g.pick(4)]
			if feat[dfUnderutilized] && g.chance(0.5) {
				frac = 5
			}
			cpu := cpuAlloc * frac / 100 / int64(np)
			if cpu < 50 {
				cpu = 50
			}
			c := container(fmt.Sprintf("%dm", cpu), g.oneOf("128Mi", "256Mi", "512Mi", "1Gi"))
			if p.gpu {
				c.Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
				c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
				pod.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
				if gpus, ok := alloc["nvidia.com/gpu"]; ok && int64(j) >= gpus.Value() {
					break
				}
			}
			pod.Spec.Containers = []corev1.Container{c}
			if feat[dfDoNotDisrupt] && g.chance(0.1) {
				pod.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
			}
			pod.Spec.NodeName = name
			pod.Status.Phase = corev1.PodRunning
			pod.Status.StartTime = &pod.CreationTimestamp
			en.Pods = append(en.Pods, pod)
		}
		if g.chance(0.4) {
			ds := corev1.Pod{}
			ds.Name = "agent-" + name
			ds.Namespace = "kube-system"
			ds.UID = types.UID(fmt.Sprintf("d%d-%d-ds%03d", seed, idx, g.podSeq))
			g.podSeq++
			ds.Labels = map[string]string{"app": "agent"}
			ds.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "agent-ds", Controller: ptr(true)}}
			ds.Spec.Containers = []corev1.Container{container("50m", "64Mi")}
			ds.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			ds.Spec.NodeName = name
			ds.Status.Phase = corev1.PodRunning
			en.Pods = append(en.Pods, ds)
		}
		sc.ExistingNodes = append(sc.ExistingNodes, en)
	}
	if feat[dfPDB] {
		var used []string
		for a := range appsUsed {
			used = append(used, a)
		}
		sort.Strings(used)
		for _, a := range used {
			if !g.chance(0.5) {
				continue
			}
			pdb := policyv1.PodDisruptionBudget{}
			pdb.Name = a
			pdb.Namespace = "default"
			pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": a}}
			switch g.pick(3) {
			case 0:
				pdb.Spec.MaxUnavailable = ptr(intstr.FromInt32(0))
				pdb.Status.DisruptionsAllowed = 0
			case 1:
				pdb.Spec.MaxUnavailable = ptr(intstr.FromInt32(1))
				pdb.Status.DisruptionsAllowed = 1
			default:
				pdb.Spec.MinAvailable = ptr(intstr.FromString("50%"))
				pdb.Status.DisruptionsAllowed = int32(g.pick(2))
			}
			sc.PDBs = append(sc.PDBs, pdb)
		}
	}
	if feat[dfPending] {
		for j := 0; j < 1+g.pick(2); j++ {
			pod := corev1.Pod{}
			pod.Name = fmt.Sprintf("pending-%d", j)
			pod.Namespace = "default"
			pod.UID = types.UID(fmt.Sprintf("d%d-%d-q%03d", seed, idx, j))
			pod.Labels = map[string]string{"app": "pending"}
			pod.CreationTimestamp = metav1.NewTime(g.base.Add(-time.Minute))
			pod.Spec.Containers = []corev1.Container{container(g.oneOf("250m", "1", "3"), "512Mi")}
			sc.Pods = append(sc.Pods, pod)
		}
	}
	for f, on := range feat {
		if on {
			sc.Tags = append(sc.Tags, f)
		}
	}
	sort.Strings(sc.Tags)
	sc.Description = fmt.Sprintf("generated disruption state (seed %d, index %d): %d nodes, %d pools, %d PDBs",
		seed, idx, len(sc.ExistingNodes), len(sc.NodePools), len(sc.PDBs))
	return sc
}
