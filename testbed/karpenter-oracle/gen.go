package main

// Seeded scenario generator. Scenario i of seed S depends only on (S, i), so
// `--count 500` is a prefix of `--count 1000`. Uses math/rand's frozen
// Go 1 source (rand.NewSource), so the output is stable across Go versions.
//
// Over 700 lines on purpose: a scenario is one sequence of draws from one stream
// (instance types, pools, DaemonSets, workloads, existing nodes, in that order), and
// a seed's output depends on that order; kept in one file so the order reads top to
// bottom. The --extended draws use their own stream (extendPools, extras), the
// --reserved draws another (gen_reserved.go).

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func cmdGenerate(args []string) error {
	fs := flag.NewFlagSet("generate", flag.ExitOnError)
	seed := fs.Int64("seed", 1, "seed")
	count := fs.Int("count", 500, "number of scenarios")
	extended := fs.Bool("extended", false, "also generate the features of extendedFeatures (from a random stream of their own, so scenarios without the flag stay byte-identical)")
	reserved := fs.Bool("reserved", false, "also generate capacity reservations and the pools and pods that use them (a stream of their own, as --extended)")
	staticOverlay := fs.Bool("static-overlay", false, "also generate static NodePools with their nodes and NodeOverlays on GPU types (a stream of their own, as --extended)")
	schedSettings := fs.Bool("scheduler-settings", false, "also generate minValuesPolicy BestEffort (with minValues) and schedulerConfig default topology spread (with ReplicaSets, StatefulSets, Services) (a stream of their own, as --extended)")
	out := fs.String("out", "", "output directory")
	if rest := parseInterleaved(fs, args); len(rest) > 0 {
		return fmt.Errorf("generate: unexpected arguments %v", rest)
	}
	if *out == "" {
		return fmt.Errorf("generate needs --out DIR")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	tags := map[string]int{}
	var total int64
	for i := 0; i < *count; i++ {
		sc := generateScenario(*seed, i, *extended, *reserved, *staticOverlay, *schedSettings)
		for _, t := range sc.Tags {
			tags[t]++
		}
		data := scenarioJSON(sc)
		total += int64(len(data))
		if err := os.WriteFile(filepath.Join(*out, sc.Name+".json"), data, 0o644); err != nil {
			return err
		}
	}
	var parts []string
	for _, k := range sortedKeys(tags) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, tags[k]))
	}
	fmt.Fprintf(os.Stderr, "karpenter-oracle: wrote %d scenarios (%d bytes) to %s\n  tags: %s\n",
		*count, total, *out, strings.Join(parts, " "))
	return nil
}

// scenarioJSON writes a scenario compactly but diffably: one top-level
// field, and one array element, per line.
func scenarioJSON(sc *Scenario) []byte {
	var buf bytes.Buffer
	m := func(v any) string { return string(prunedJSON(v)) }
	arr := func(name string, n int, el func(i int) any, last bool) {
		fmt.Fprintf(&buf, "%s:[", m(name))
		for i := 0; i < n; i++ {
			if i > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n ")
			buf.WriteString(m(el(i)))
		}
		if n > 0 {
			buf.WriteString("\n")
		}
		buf.WriteString("]")
		if !last {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("{\n")
	fmt.Fprintf(&buf, "%s:%s,\n", m("name"), m(sc.Name))
	if sc.Description != "" {
		fmt.Fprintf(&buf, "%s:%s,\n", m("description"), m(sc.Description))
	}
	if len(sc.Tags) > 0 {
		fmt.Fprintf(&buf, "%s:%s,\n", m("tags"), m(sc.Tags))
	}
	if sc.MinValuesPolicy != "" {
		fmt.Fprintf(&buf, "%s:%s,\n", m("minValuesPolicy"), m(sc.MinValuesPolicy))
	}
	if len(sc.SchedulerConfig) > 0 {
		fmt.Fprintf(&buf, "%s:%s,\n", m("schedulerConfig"), m(sc.SchedulerConfig))
	}
	arr("nodePools", len(sc.NodePools), func(i int) any { return sc.NodePools[i] }, false)
	arr("instanceTypes", len(sc.InstanceTypes), func(i int) any { return sc.InstanceTypes[i] }, false)
	arr("existingNodes", len(sc.ExistingNodes), func(i int) any { return sc.ExistingNodes[i] }, false)
	arr("daemonSets", len(sc.DaemonSets), func(i int) any { return sc.DaemonSets[i] }, false)
	if len(sc.Services) > 0 {
		arr("services", len(sc.Services), func(i int) any { return sc.Services[i] }, false)
	}
	if len(sc.ReplicaSets) > 0 {
		arr("replicaSets", len(sc.ReplicaSets), func(i int) any { return sc.ReplicaSets[i] }, false)
	}
	if len(sc.StatefulSets) > 0 {
		arr("statefulSets", len(sc.StatefulSets), func(i int) any { return sc.StatefulSets[i] }, false)
	}
	if len(sc.NodeOverlays) > 0 {
		arr("nodeOverlays", len(sc.NodeOverlays), func(i int) any { return sc.NodeOverlays[i] }, false)
	}
	arr("pods", len(sc.Pods), func(i int) any { return sc.Pods[i] }, true)
	buf.WriteString("}\n")
	return buf.Bytes()
}

// ---- instance type catalog ----

type catalogEntry struct {
	name     string
	arch     string
	cpu      int64 // cores
	memGi    int64
	pods     int64
	gpus     int64
	odPrice  float64
	category string // c m r g
}

func catalog() []catalogEntry {
	var out []catalogEntry
	sizes := []struct {
		suffix string
		cpu    int64
	}{{"medium", 1}, {"large", 2}, {"xlarge", 4}, {"2xlarge", 8}, {"4xlarge", 16}, {"8xlarge", 32}, {"16xlarge", 64}}
	podsFor := func(cpu int64) int64 {
		switch {
		case cpu <= 1:
			return 8
		case cpu == 2:
			return 29
		case cpu == 4:
			return 58
		default:
			return 110
		}
	}
	families := []struct {
		name     string
		arch     string
		ratio    int64 // GiB per core
		perCore  float64
		category string
	}{
		{"c6i", "amd64", 2, 0.0425, "c"},
		{"m6i", "amd64", 4, 0.048, "m"},
		{"r6i", "amd64", 8, 0.063, "r"},
		{"c7g", "arm64", 2, 0.03625, "c"},
		{"m7g", "arm64", 4, 0.0408, "m"},
		{"r7g", "arm64", 8, 0.0536, "r"},
	}
	for _, f := range families {
		for _, s := range sizes {
			if s.cpu == 1 && f.category != "m" {
				continue
			}
			out = append(out, catalogEntry{
				name: f.name + "." + s.suffix, arch: f.arch, cpu: s.cpu, memGi: s.cpu * f.ratio,
				pods: podsFor(s.cpu), odPrice: round4(f.perCore * float64(s.cpu)), category: f.category,
			})
		}
	}
	gpus := []catalogEntry{
		{name: "g4dn.xlarge", cpu: 4, memGi: 16, gpus: 1, odPrice: 0.526},
		{name: "g4dn.12xlarge", cpu: 48, memGi: 192, gpus: 4, odPrice: 3.912},
		{name: "g5.xlarge", cpu: 4, memGi: 16, gpus: 1, odPrice: 1.006},
		{name: "g5.2xlarge", cpu: 8, memGi: 32, gpus: 1, odPrice: 1.212},
		{name: "g5.12xlarge", cpu: 48, memGi: 192, gpus: 4, odPrice: 5.672},
		{name: "g5.48xlarge", cpu: 192, memGi: 768, gpus: 8, odPrice: 16.288},
	}
	for _, g := range gpus {
		g.arch = "amd64"
		g.pods = podsFor(g.cpu)
		g.category = "g"
		out = append(out, g)
	}
	return out
}

func round4(f float64) float64 { return math.Round(f*10000) / 10000 }

// ---- generator ----

type gen struct {
	r        *rand.Rand
	seed     int64
	idx      int
	zones    []string
	its      []catalogEntry // chosen instance types
	specs    []InstanceTypeSpec
	features map[string]bool
	// extended: also the features of extendedFeatures, drawn from x (a
	// stream of their own, so r, and every scenario without them, is
	// unchanged).
	extended bool
	x        *rand.Rand
	// y: the --reserved draws (gen_reserved.go), a stream of their own.
	// z: the --static-overlay draws (gen_static.go), another.
	z *rand.Rand
	y *rand.Rand
	// sched: the --scheduler-settings draws (gen_sched.go), another.
	sched *rand.Rand
	pools []*karpv1.NodePool
	// reservedTypes: the types that got a reservation (gen_reserved.go).
	reservedTypes []string
	podSeq        int
	base          time.Time
}

const (
	featTaints        = "taints"
	featNodeSelector  = "node-selector"
	featNodeAffinity  = "node-affinity"
	featZoneSpread    = "zone-spread"
	featHostSpread    = "hostname-spread"
	featPodAffinity   = "pod-affinity"
	featAntiAffinity  = "pod-anti-affinity"
	featMultiPool     = "multi-pool-weights"
	featLimits        = "pool-limits"
	featGPU           = "gpu"
	featCapacityTypes = "spot-on-demand"
	featExisting      = "existing-nodes"
	featDaemonSets    = "daemonsets"
	featPreferences   = "preferences"
)

var allFeatures = []string{featTaints, featNodeSelector, featNodeAffinity, featZoneSpread, featHostSpread,
	featPodAffinity, featAntiAffinity, featMultiPool, featLimits, featGPU, featCapacityTypes, featExisting,
	featDaemonSets, featPreferences}

func (g *gen) pick(n int) int            { return g.r.Intn(n) }
func (g *gen) chance(p float64) bool     { return g.r.Float64() < p }
func (g *gen) oneOf(xs ...string) string { return xs[g.r.Intn(len(xs))] }

// Features only --extended generates: each pod spec gets each with a small
// probability (hostPort 8080/TCP, a restartable init container (sidecar),
// pod overhead, an ephemeral-storage request, matchLabelKeys and
// nodeAffinityPolicy: Ignore on topology spreads, Gt/Lt on labelGeneration in
// node affinity, preferred pod affinity); instance types then advertise
// ephemeral-storage and labelGeneration, and NodePools may get integer
// requirements and minValues (extendPools).
const (
	featHostPorts    = "host-ports"
	featSidecar      = "sidecar"
	featPodOverhead  = "pod-overhead"
	featEphemeral    = "ephemeral-storage"
	featMatchLabel   = "match-label-keys"
	featAffinityPol  = "node-affinity-policy"
	featIntReqs      = "int-requirements"
	featMinValues    = "min-values"
	featPrefAffinity = "pod-affinity-preferred"
	extendedStreamID = 99991
	// labelGeneration is an integer instance-type label (the family's
	// generation: c6i 6, g4dn 4) for Gt/Lt/Gte/Lte. A custom key, not one of
	// the AWS provider's (karpenter.k8s.aws/instance-generation): the oracle
	// has core Karpenter's well-known labels only, kk-sim the AWS provider's,
	// and a pod may require an undefined well-known label but not a custom one.
	labelGeneration = "example.com/generation"
)

// generation is the integer in an instance type's family name (c6i.large 6).
func generation(name string) string {
	var d []byte
	for i := 0; i < len(name) && name[i] != '.'; i++ {
		if name[i] >= '0' && name[i] <= '9' {
			d = append(d, name[i])
		}
	}
	return string(d)
}

// extendPools adds the extended features of NodePools (x only): integer
// requirements on labelGeneration (Gt/Lt/Gte/Lte, or Exists so that pods may
// use the key), and minValues on the instance-type or generation key.
func (g *gen) extendPools() {
	for _, np := range g.pools {
		reqs := &np.Spec.Template.Spec.Requirements
		// (generations: g4dn 4, g5 5, *6i 6, *7g 7)
		if g.xchance(0.2) {
			switch g.x.Intn(5) {
			case 0:
				*reqs = append(*reqs, req(labelGeneration, corev1.NodeSelectorOpGt, fmt.Sprint(4+g.x.Intn(2))))
			case 1:
				*reqs = append(*reqs, req(labelGeneration, corev1.NodeSelectorOpLt, fmt.Sprint(7+g.x.Intn(2))))
			case 2:
				*reqs = append(*reqs, req(labelGeneration, karpv1.NodeSelectorOpGte, fmt.Sprint(5+g.x.Intn(2))))
			case 3:
				*reqs = append(*reqs, req(labelGeneration, karpv1.NodeSelectorOpLte, fmt.Sprint(6+g.x.Intn(2))))
			default:
				*reqs = append(*reqs, req(labelGeneration, corev1.NodeSelectorOpExists))
			}
			g.features[featIntReqs] = true
		}
		if g.xchance(0.15) {
			n := 2 + g.x.Intn(4)
			key := corev1.LabelInstanceTypeStable
			if g.xchance(0.3) {
				key = labelGeneration
				n = 2
			}
			found := false
			for i := range *reqs {
				if (*reqs)[i].Key == key && (*reqs)[i].Operator != corev1.NodeSelectorOpNotIn {
					(*reqs)[i].MinValues = ptr(n)
					found = true
					break
				}
			}
			if !found {
				r := req(key, corev1.NodeSelectorOpExists)
				r.MinValues = ptr(n)
				*reqs = append(*reqs, r)
			}
			g.features[featMinValues] = true
		}
	}
}

func (g *gen) xchance(p float64) bool { return g.x.Float64() < p }

// extras adds the extended features to a workload's pod spec (x only).
func (g *gen) extras(spec *corev1.PodSpec, w *workload, earlier []*workload) {
	if g.xchance(0.08) {
		spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
		g.features[featHostPorts] = true
	}
	if g.xchance(0.08) {
		side := container("100m", "64Mi")
		side.Name = "sidecar"
		side.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
		spec.InitContainers = append(spec.InitContainers, side)
		g.features[featSidecar] = true
	}
	if g.xchance(0.08) {
		spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
		g.features[featPodOverhead] = true
	}
	if g.xchance(0.08) {
		q := []string{"1Gi", "10Gi", "50Gi", "200Gi"}[g.x.Intn(4)]
		spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse(q)
		g.features[featEphemeral] = true
	}
	for i := range spec.TopologySpreadConstraints {
		if g.xchance(0.3) {
			w.labels["pod-template-hash"] = fmt.Sprintf("h%d", g.x.Intn(2))
			spec.TopologySpreadConstraints[i].MatchLabelKeys = []string{"pod-template-hash"}
			g.features[featMatchLabel] = true
		}
		if g.xchance(0.2) {
			spec.TopologySpreadConstraints[i].NodeAffinityPolicy = ptr(corev1.NodeInclusionPolicyIgnore)
			g.features[featAffinityPol] = true
		}
	}
	if g.xchance(0.1) {
		// Gt/Lt on the integer label: ANDed into every required term, or a term of its own
		var e corev1.NodeSelectorRequirement
		if g.xchance(0.5) {
			e = corev1.NodeSelectorRequirement{Key: labelGeneration, Operator: corev1.NodeSelectorOpGt, Values: []string{fmt.Sprint(4 + g.x.Intn(3))}}
		} else {
			e = corev1.NodeSelectorRequirement{Key: labelGeneration, Operator: corev1.NodeSelectorOpLt, Values: []string{fmt.Sprint(5 + g.x.Intn(3))}}
		}
		spec.Affinity = ensureAffinity(spec.Affinity)
		if spec.Affinity.NodeAffinity == nil {
			spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
		}
		na := spec.Affinity.NodeAffinity
		if g.xchance(0.3) {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: int32(1 + g.x.Intn(100)), Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{e}}})
		} else if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{e}}}}
		} else {
			terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			for i := range terms {
				terms[i].MatchExpressions = append(terms[i].MatchExpressions, e)
			}
		}
		g.features[featIntReqs] = true
	}
	if g.xchance(0.1) {
		sel := map[string]string{"app": w.name}
		if len(earlier) > 0 && g.xchance(0.5) {
			sel = map[string]string{"app": earlier[g.x.Intn(len(earlier))].name}
		}
		key := corev1.LabelTopologyZone
		if g.xchance(0.4) {
			key = corev1.LabelHostname
		}
		spec.Affinity = ensureAffinity(spec.Affinity)
		if spec.Affinity.PodAffinity == nil {
			spec.Affinity.PodAffinity = &corev1.PodAffinity{}
		}
		spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(spec.Affinity.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
			corev1.WeightedPodAffinityTerm{Weight: int32(1 + g.x.Intn(100)), PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: key}})
		g.features[featPrefAffinity] = true
	}
}

func generateScenario(seed int64, idx int, extended, reserved, staticOverlay, schedSettings bool) *Scenario {
	g := &gen{
		sched:    rand.New(rand.NewSource(seed*1_000_003 + int64(idx)*7919 + schedStreamID)),
		z:        rand.New(rand.NewSource(seed*1_000_003 + int64(idx)*7919 + staticStreamID)),
		extended: extended,
		y:        rand.New(rand.NewSource(seed*1_000_003 + int64(idx)*7919 + reservedStreamID)),
		x:        rand.New(rand.NewSource(seed*1_000_003 + int64(idx)*7919 + extendedStreamID)),
		r:        rand.New(rand.NewSource(seed*1_000_003 + int64(idx)*7919 + 17)),
		seed:     seed,
		idx:      idx,
		features: map[string]bool{},
		base:     time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	// One feature chosen by rotation so every feature gets ~count/14
	// scenarios, plus 0-3 random extras.
	g.features[allFeatures[idx%len(allFeatures)]] = true
	for extra := g.pick(4); extra > 0; extra-- {
		g.features[allFeatures[g.pick(len(allFeatures))]] = true
	}
	if g.features[featLimits] {
		g.features[featMultiPool] = g.features[featMultiPool] || g.chance(0.5)
	}

	allZones := []string{"zone-a", "zone-b", "zone-c"}
	nz := 3
	if g.chance(0.5) {
		nz = 2
	}
	if g.chance(0.05) {
		nz = 1
	}
	g.zones = allZones[:nz]

	sc := &Scenario{Name: fmt.Sprintf("gen-s%d-%04d", seed, idx)}
	g.instanceTypes()
	sc.InstanceTypes = g.specs
	g.nodePools()
	if g.extended {
		g.extendPools()
	}
	if reserved && g.y.Float64() < reservedShare {
		g.reservations()
	}
	var sched schedPlan
	if schedSettings {
		sched = g.schedulerSettingsPlan()
		if sched.minValues {
			g.minValuesBestEffort(sc, &sched)
		}
	}
	for _, np := range g.pools {
		sc.NodePools = append(sc.NodePools, *np)
	}
	var dss []appsv1.DaemonSet
	if g.features[featDaemonSets] || g.chance(0.15) {
		g.features[featDaemonSets] = true
		dss = g.daemonSets()
	}
	sc.DaemonSets = dss
	workloads := g.workloads()
	if len(g.reservedTypes) > 0 {
		g.reservedPods(workloads)
	}
	if g.features[featExisting] || g.chance(0.1) {
		g.features[featExisting] = true
		sc.ExistingNodes = g.existingNodes(workloads, dss)
	}
	if staticOverlay && g.z.Float64() < staticPoolShare {
		g.staticPool(sc)
	}
	if staticOverlay && g.z.Float64() < nodeOverlayShare {
		g.nodeOverlays(sc)
	}
	if sched.spread {
		g.defaultSpread(sc, workloads)
	}
	if sched.family {
		labelNodeFamilies(sc)
	}
	for _, w := range workloads {
		sc.Pods = append(sc.Pods, w.pods...)
	}
	for f, on := range g.features {
		if on {
			sc.Tags = append(sc.Tags, f)
		}
	}
	sort.Strings(sc.Tags)
	sc.Description = fmt.Sprintf("generated (seed %d, index %d): %d pods, %d instance types, %d pools, %d existing nodes, %d daemonsets",
		seed, idx, len(sc.Pods), len(sc.InstanceTypes), len(sc.NodePools), len(sc.ExistingNodes), len(sc.DaemonSets))
	return sc
}

func (g *gen) instanceTypes() {
	cat := catalog()
	var general, gpu []catalogEntry
	for _, c := range cat {
		if c.gpus > 0 {
			gpu = append(gpu, c)
		} else {
			general = append(general, c)
		}
	}
	// 5..40 types, skewed small to keep the committed set small.
	n := 5 + int(35*math.Pow(g.r.Float64(), 8))
	var chosen []catalogEntry
	if g.features[featGPU] {
		ng := 1 + g.pick(len(gpu))
		if ng > n-3 {
			ng = n - 3
		}
		perm := g.r.Perm(len(gpu))
		for i := 0; i < ng; i++ {
			chosen = append(chosen, gpu[perm[i]])
		}
	}
	perm := g.r.Perm(len(general))
	for i := 0; len(chosen) < n && i < len(perm); i++ {
		chosen = append(chosen, general[perm[i]])
	}
	sort.Slice(chosen, func(i, j int) bool { return chosen[i].name < chosen[j].name })
	g.its = chosen
	useAllocatable := g.chance(0.2)
	for _, c := range chosen {
		spec := InstanceTypeSpec{
			Name: c.name,
			// (no kubernetes.io/os label: the pools require os=linux, and an
			// instance type that leaves a well-known label undefined is
			// compatible with any value of it)
			Labels: map[string]string{corev1.LabelArchStable: c.arch},
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(c.cpu, resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dGi", c.memGi)),
				corev1.ResourcePods:   *resource.NewQuantity(c.pods, resource.DecimalSI),
			},
		}
		if c.gpus > 0 {
			spec.Capacity["nvidia.com/gpu"] = *resource.NewQuantity(c.gpus, resource.DecimalSI)
		}
		if g.extended {
			spec.Labels[labelGeneration] = generation(c.name)
			spec.Capacity[corev1.ResourceEphemeralStorage] = resource.MustParse(fmt.Sprintf("%dGi", 20+10*c.cpu))
		}
		// EKS-like overhead: kube-reserved cpu grows with cores, memory with
		// max pods; 100Mi hard eviction threshold.
		kubeCPU := 60 + 10*c.cpu
		kubeMem := 255 + 11*c.pods
		if useAllocatable {
			spec.Allocatable = corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(c.cpu*1000-kubeCPU, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(c.memGi*1024*1024*1024-(kubeMem+100)*1024*1024, resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(c.pods, resource.DecimalSI),
			}
			if c.gpus > 0 {
				spec.Allocatable["nvidia.com/gpu"] = *resource.NewQuantity(c.gpus, resource.DecimalSI)
			}
			if g.extended {
				spec.Allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse(fmt.Sprintf("%dGi", 18+10*c.cpu))
			}
		} else {
			spec.Overhead = &OverheadSpec{
				KubeReserved: corev1.ResourceList{
					corev1.ResourceCPU:    *resource.NewMilliQuantity(kubeCPU, resource.DecimalSI),
					corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", kubeMem)),
				},
				EvictionThreshold: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
			}
			if g.chance(0.3) {
				spec.Overhead.SystemReserved = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")}
			}
		}
		// offerings: on-demand and spot per zone, some missing / unavailable
		odOnly := g.chance(0.1)
		spotOnly := !odOnly && g.chance(0.05)
		for _, z := range g.zones {
			if len(g.zones) > 1 && g.chance(0.1) {
				continue // not offered in this zone
			}
			if !spotOnly {
				o := OfferingSpec{Zone: z, CapacityType: karpv1.CapacityTypeOnDemand, Price: c.odPrice}
				if g.chance(0.05) {
					o.Available = ptr(false)
				}
				spec.Offerings = append(spec.Offerings, o)
			}
			if !odOnly {
				o := OfferingSpec{Zone: z, CapacityType: karpv1.CapacityTypeSpot, Price: round4(c.odPrice * (0.3 + 0.4*g.r.Float64()))}
				if g.chance(0.1) {
					o.Available = ptr(false)
				}
				spec.Offerings = append(spec.Offerings, o)
			}
		}
		if len(spec.Offerings) == 0 {
			spec.Offerings = append(spec.Offerings, OfferingSpec{Zone: g.zones[0], CapacityType: karpv1.CapacityTypeOnDemand, Price: c.odPrice})
		}
		g.specs = append(g.specs, spec)
	}
}

func ptr[T any](v T) *T { return &v }

func req(key string, op corev1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

func (g *gen) gpuNames() []string {
	var out []string
	for _, c := range g.its {
		if c.gpus > 0 {
			out = append(out, c.name)
		}
	}
	return out
}

func newPool(name string) *karpv1.NodePool {
	np := &karpv1.NodePool{}
	np.Name = name
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.test.sh", Kind: "TestNodeClass", Name: "default"}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{}
	return np
}

func (g *gen) nodePools() {
	def := newPool("default")
	def.Spec.Template.Spec.Requirements = append(def.Spec.Template.Spec.Requirements, req(corev1.LabelOSStable, corev1.NodeSelectorOpIn, "linux"))
	switch g.pick(4) {
	case 0:
		def.Spec.Template.Spec.Requirements = append(def.Spec.Template.Spec.Requirements, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "on-demand"))
	case 1:
		def.Spec.Template.Spec.Requirements = append(def.Spec.Template.Spec.Requirements, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "spot", "on-demand"))
	}
	if g.chance(0.3) {
		def.Spec.Template.Spec.Requirements = append(def.Spec.Template.Spec.Requirements, req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64"))
	}
	if g.features[featGPU] && g.chance(0.6) {
		// keep GPU machines out of the default pool
		def.Spec.Template.Spec.Requirements = append(def.Spec.Template.Spec.Requirements, req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpNotIn, g.gpuNames()...))
	}
	if g.features[featNodeSelector] && g.chance(0.5) {
		def.Spec.Template.Labels = map[string]string{"team": g.oneOf("a", "b")}
	}
	if g.features[featLimits] && g.chance(0.7) {
		def.Spec.Limits = karpv1.Limits{corev1.ResourceCPU: *resource.NewQuantity(int64(4+g.pick(60)), resource.DecimalSI)}
		if g.chance(0.3) {
			def.Spec.Limits[corev1.ResourceMemory] = resource.MustParse(fmt.Sprintf("%dGi", 16+g.pick(200)))
		}
	}
	if g.chance(0.2) {
		def.Spec.Weight = ptr(int32(g.pick(100)))
	}
	g.pools = append(g.pools, def)

	if g.features[featGPU] {
		gp := newPool("gpu")
		gp.Spec.Template.Spec.Requirements = append(gp.Spec.Template.Spec.Requirements, req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, g.gpuNames()...))
		gp.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		if g.chance(0.5) {
			gp.Spec.Weight = ptr(int32(10 + g.pick(50)))
		}
		if g.chance(0.3) {
			gp.Spec.Limits = karpv1.Limits{"nvidia.com/gpu": *resource.NewQuantity(int64(1+g.pick(8)), resource.DecimalSI)}
		}
		g.pools = append(g.pools, gp)
	}
	if g.features[featMultiPool] {
		n := 1 + g.pick(2)
		for i := 0; i < n; i++ {
			var np *karpv1.NodePool
			switch g.pick(4) {
			case 0:
				np = newPool("spot")
				np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "spot"))
			case 1:
				np = newPool("arm")
				np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "arm64"))
			case 2:
				np = newPool("team-b")
				np.Spec.Template.Labels = map[string]string{"team": "b"}
				if g.chance(0.5) {
					np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "team", Value: "b", Effect: corev1.TaintEffectNoSchedule}}
				}
			default:
				np = newPool("zonal")
				np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, g.zones[0]))
			}
			if g.poolByName(np.Name) != nil {
				continue
			}
			np.Spec.Weight = ptr(int32(1 + g.pick(100)))
			if g.features[featLimits] && g.chance(0.6) {
				if g.chance(0.3) {
					np.Spec.Limits = karpv1.Limits{"nodes": *resource.NewQuantity(int64(1+g.pick(3)), resource.DecimalSI)}
				} else {
					np.Spec.Limits = karpv1.Limits{corev1.ResourceCPU: *resource.NewQuantity(int64(2+g.pick(30)), resource.DecimalSI)}
				}
			}
			if g.features[featCapacityTypes] && np.Name != "spot" && g.chance(0.5) {
				np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "on-demand"))
			}
			g.pools = append(g.pools, np)
		}
	}
	if g.features[featTaints] {
		np := newPool("dedicated")
		np.Spec.Template.Labels = map[string]string{"dedicated": "batch"}
		eff := corev1.TaintEffectNoSchedule
		if g.chance(0.25) {
			eff = corev1.TaintEffectNoExecute
		}
		np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: eff}}
		if g.chance(0.4) {
			np.Spec.Template.Spec.StartupTaints = []corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}}
		}
		if g.chance(0.5) {
			np.Spec.Weight = ptr(int32(g.pick(100)))
		}
		g.pools = append(g.pools, np)
		if g.chance(0.3) {
			// a PreferNoSchedule taint on the default pool: Karpenter tolerates it
			// only while relaxing preferences
			g.pools[0].Spec.Template.Spec.Taints = append(g.pools[0].Spec.Template.Spec.Taints,
				corev1.Taint{Key: "example.com/soft", Effect: corev1.TaintEffectPreferNoSchedule})
		}
	}
}

func (g *gen) poolByName(name string) *karpv1.NodePool {
	for _, p := range g.pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ---- daemonsets ----

func (g *gen) daemonSets() []appsv1.DaemonSet {
	var out []appsv1.DaemonSet
	n := 1 + g.pick(2)
	kinds := g.r.Perm(3)
	for i := 0; i < n; i++ {
		ds := appsv1.DaemonSet{}
		ds.Namespace = "kube-system"
		labels := map[string]string{}
		spec := corev1.PodSpec{}
		switch kinds[i] {
		case 0:
			ds.Name = "log-agent"
			spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			spec.Containers = []corev1.Container{container(g.oneOf("50m", "100m", "200m"), g.oneOf("64Mi", "128Mi", "256Mi"))}
		case 1:
			ds.Name = "node-exporter"
			spec.NodeSelector = map[string]string{corev1.LabelArchStable: g.oneOf("amd64", "arm64")}
			spec.Containers = []corev1.Container{container("100m", "64Mi")}
		default:
			ds.Name = "gpu-device-plugin"
			spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			gpus := g.gpuNames()
			if len(gpus) == 0 {
				gpus = []string{"g5.xlarge"}
			}
			spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: gpus}}}}}}}
			spec.Containers = []corev1.Container{container("50m", "100Mi")}
		}
		labels["app"] = ds.Name
		ds.UID = types.UID(fmt.Sprintf("ds-%s", ds.Name))
		ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
		ds.Spec.Template.Labels = labels
		ds.Spec.Template.Spec = spec
		out = append(out, ds)
	}
	return out
}

func container(cpu, mem string) corev1.Container {
	c := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	if cpu != "" {
		c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return c
}

// ---- workloads (pending pods) ----

type workload struct {
	name   string
	labels map[string]string
	pods   []corev1.Pod
	// template used for bound copies on existing nodes
	template corev1.PodSpec
	ns       string
}

func (g *gen) workloads() []*workload {
	// 1..40 pods, skewed small
	target := 1 + int(39*math.Pow(g.r.Float64(), 3.5))
	var ws []*workload
	total := 0
	for wi := 0; total < target; wi++ {
		replicas := 1 + g.pick(8)
		if total+replicas > target {
			replicas = target - total
		}
		w := g.workload(wi, replicas, ws)
		ws = append(ws, w)
		total += replicas
	}
	return ws
}

var cpuChoices = []string{"100m", "250m", "500m", "750m", "1", "1500m", "2", "3", "4"}
var memChoices = []string{"128Mi", "256Mi", "512Mi", "1Gi", "1536Mi", "2Gi", "4Gi", "8Gi"}

func (g *gen) workload(wi, replicas int, earlier []*workload) *workload {
	w := &workload{name: fmt.Sprintf("w%d", wi), ns: "default"}
	if g.chance(0.15) {
		w.ns = "team-a"
	}
	w.labels = map[string]string{"app": w.name}
	if g.chance(0.3) {
		w.labels["tier"] = g.oneOf("web", "batch")
	}
	spec := corev1.PodSpec{}
	cpu := cpuChoices[g.pick(len(cpuChoices))]
	mem := memChoices[g.pick(len(memChoices))]
	if g.chance(0.05) {
		cpu = g.oneOf("48", "100", "300") // too big for most (or all) instance types
	}
	c := container(cpu, mem)
	if g.chance(0.05) {
		c = container("", mem) // memory only
	}
	spec.Containers = []corev1.Container{c}
	if g.chance(0.1) {
		// an init container bigger than the app container
		spec.InitContainers = []corev1.Container{container("2", "256Mi")}
		spec.InitContainers[0].Name = "init"
	}

	// features, each applied with some probability if on
	on := func(f string, p float64) bool { return g.features[f] && g.chance(p) }
	if on(featGPU, 0.5) {
		n := int64(1 + g.pick(2))
		if g.chance(0.2) {
			n = 4
		}
		q := *resource.NewQuantity(n, resource.DecimalSI)
		spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = q
		spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
		if g.chance(0.9) {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	if on(featTaints, 0.5) {
		if g.chance(0.5) {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch"})
		} else {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists})
		}
		if g.chance(0.5) {
			spec.NodeSelector = map[string]string{"dedicated": "batch"}
		}
	}
	if on(featMultiPool, 0.3) && g.poolByName("team-b") != nil {
		spec.NodeSelector = merge(spec.NodeSelector, map[string]string{"team": "b"})
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "team", Value: "b", Operator: corev1.TolerationOpEqual, Effect: corev1.TaintEffectNoSchedule})
	}
	if on(featNodeSelector, 0.6) {
		switch g.pick(6) {
		case 0:
			spec.NodeSelector = merge(spec.NodeSelector, map[string]string{corev1.LabelTopologyZone: g.zones[g.pick(len(g.zones))]})
		case 1:
			spec.NodeSelector = merge(spec.NodeSelector, map[string]string{corev1.LabelArchStable: g.oneOf("amd64", "arm64")})
		case 2:
			spec.NodeSelector = merge(spec.NodeSelector, map[string]string{karpv1.CapacityTypeLabelKey: g.oneOf("spot", "on-demand")})
		case 3:
			spec.NodeSelector = merge(spec.NodeSelector, map[string]string{corev1.LabelInstanceTypeStable: g.its[g.pick(len(g.its))].name})
		case 4:
			spec.NodeSelector = merge(spec.NodeSelector, map[string]string{"team": g.oneOf("a", "b")})
		default:
			spec.NodeSelector = merge(spec.NodeSelector, map[string]string{"kubernetes.io/os": "linux", "karpenter.sh/nodepool": g.pools[g.pick(len(g.pools))].Name})
		}
	}
	if on(featCapacityTypes, 0.5) {
		spec.NodeSelector = merge(spec.NodeSelector, map[string]string{karpv1.CapacityTypeLabelKey: g.oneOf("spot", "on-demand")})
	}
	if on(featNodeAffinity, 0.7) {
		spec.Affinity = ensureAffinity(spec.Affinity)
		terms := []corev1.NodeSelectorTerm{g.nodeSelectorTerm()}
		if g.chance(0.25) {
			terms = append(terms, g.nodeSelectorTerm()) // ORed terms
		}
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}
	}
	if on(featPreferences, 0.7) {
		switch g.pick(3) {
		case 0:
			spec.Affinity = ensureAffinity(spec.Affinity)
			if spec.Affinity.NodeAffinity == nil {
				spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
			}
			spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{
				{Weight: int32(1 + g.pick(100)), Preference: g.nodeSelectorTerm()},
			}
			if g.chance(0.4) {
				spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
					corev1.PreferredSchedulingTerm{Weight: int32(1 + g.pick(100)), Preference: g.nodeSelectorTerm()})
			}
		case 1:
			spec.TopologySpreadConstraints = append(spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
				MaxSkew: 1, TopologyKey: g.oneOf(corev1.LabelTopologyZone, corev1.LabelHostname), WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
			})
		default:
			spec.Affinity = ensureAffinity(spec.Affinity)
			spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: int32(1 + g.pick(100)),
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
					TopologyKey:   g.oneOf(corev1.LabelHostname, corev1.LabelTopologyZone),
				},
			}}}
		}
	}
	if on(featZoneSpread, 0.7) {
		tsc := corev1.TopologySpreadConstraint{
			MaxSkew: int32(1 + g.pick(2)), TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
		}
		if g.chance(0.15) {
			tsc.MinDomains = ptr(int32(len(g.zones)))
		}
		if g.chance(0.1) {
			tsc.NodeTaintsPolicy = ptr(corev1.NodeInclusionPolicyHonor)
		}
		spec.TopologySpreadConstraints = append(spec.TopologySpreadConstraints, tsc)
	}
	if on(featHostSpread, 0.7) {
		spec.TopologySpreadConstraints = append(spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: int32(1 + g.pick(2)), TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
		})
	}
	if on(featAntiAffinity, 0.7) {
		spec.Affinity = ensureAffinity(spec.Affinity)
		key := corev1.LabelHostname
		if g.chance(0.3) {
			key = corev1.LabelTopologyZone
		}
		sel := map[string]string{"app": w.name}
		if len(earlier) > 0 && g.chance(0.3) {
			sel = map[string]string{"app": earlier[g.pick(len(earlier))].name} // avoid another workload
		}
		spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: key,
		}}}
	}
	if on(featPodAffinity, 0.7) {
		spec.Affinity = ensureAffinity(spec.Affinity)
		key := corev1.LabelTopologyZone
		if g.chance(0.4) {
			key = corev1.LabelHostname
		}
		sel := map[string]string{"app": w.name}
		if len(earlier) > 0 && g.chance(0.5) {
			sel = map[string]string{"app": earlier[g.pick(len(earlier))].name}
		}
		term := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: key}
		if g.chance(0.15) {
			term.Namespaces = []string{"default", "team-a"}
		}
		spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}
	}
	if g.extended {
		g.extras(&spec, w, earlier)
	}
	w.template = spec
	created := g.base.Add(time.Duration(wi) * time.Second)
	for i := 0; i < replicas; i++ {
		p := corev1.Pod{}
		p.Name = fmt.Sprintf("%s-%d", w.name, i)
		p.Namespace = w.ns
		// random-looking UIDs: Karpenter's queue breaks ties on creation
		// time first and UID second, so UID order must not follow creation order
		p.UID = types.UID(fmt.Sprintf("%08x-%03d", g.r.Uint32(), g.podSeq))
		g.podSeq++
		p.Labels = copyMap(w.labels)
		p.CreationTimestamp = metav1.NewTime(created)
		p.Spec = *spec.DeepCopy()
		w.pods = append(w.pods, p)
	}
	return w
}

func (g *gen) nodeSelectorTerm() corev1.NodeSelectorTerm {
	var exprs []corev1.NodeSelectorRequirement
	n := 1 + g.pick(2)
	for i := 0; i < n; i++ {
		switch g.pick(7) {
		case 0:
			zs := append([]string{}, g.zones...)
			g.r.Shuffle(len(zs), func(i, j int) { zs[i], zs[j] = zs[j], zs[i] })
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: zs[:1+g.pick(len(zs))]})
		case 1:
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpNotIn, Values: []string{g.zones[g.pick(len(g.zones))]}})
		case 2:
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{g.oneOf("amd64", "arm64")}})
		case 3:
			var names []string
			for _, c := range g.its {
				if g.chance(0.4) {
					names = append(names, c.name)
				}
			}
			if len(names) == 0 {
				names = []string{g.its[0].name}
			}
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: corev1.LabelInstanceTypeStable, Operator: g.oneOfOp(corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn), Values: names})
		case 4:
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{g.oneOf("spot", "on-demand")}})
		case 5:
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: "team", Operator: g.oneOfOp(corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn), Values: []string{g.oneOf("a", "b")}})
		default:
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: "dedicated", Operator: g.oneOfOp(corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist)})
		}
	}
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func (g *gen) oneOfOp(ops ...corev1.NodeSelectorOperator) corev1.NodeSelectorOperator {
	return ops[g.pick(len(ops))]
}

func ensureAffinity(a *corev1.Affinity) *corev1.Affinity {
	if a == nil {
		return &corev1.Affinity{}
	}
	return a
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func copyMap(m map[string]string) map[string]string { return merge(nil, m) }

// ---- existing nodes ----

func (g *gen) existingNodes(ws []*workload, dss []appsv1.DaemonSet) []ExistingNodeSpec {
	var out []ExistingNodeSpec
	n := 1 + g.pick(3)
	for i := 0; i < n; i++ {
		spec := g.specs[g.pick(len(g.specs))]
		cat := g.its[indexOf(g.its, spec.Name)]
		zone := g.zones[g.pick(len(g.zones))]
		ct := g.oneOf("spot", "on-demand")
		name := fmt.Sprintf("node-%d", i)
		labels := map[string]string{
			corev1.LabelHostname:           name,
			corev1.LabelInstanceTypeStable: spec.Name,
			corev1.LabelTopologyZone:       zone,
			corev1.LabelArchStable:         cat.arch,
			corev1.LabelOSStable:           "linux",
			karpv1.CapacityTypeLabelKey:    ct,
		}
		if g.extended {
			labels[labelGeneration] = generation(spec.Name)
		}
		var taints []corev1.Taint
		managed := g.chance(0.8)
		if managed {
			pool := g.pools[g.pick(len(g.pools))]
			labels[karpv1.NodePoolLabelKey] = pool.Name
			labels[karpv1.NodeRegisteredLabelKey] = "true"
			for k, v := range pool.Spec.Template.Labels {
				labels[k] = v
			}
			taints = append(taints, pool.Spec.Template.Spec.Taints...)
			if g.chance(0.85) {
				labels[karpv1.NodeInitializedLabelKey] = "true"
			} else {
				// not yet initialized: still carries its startup taints and an
				// ephemeral not-ready taint, which Karpenter ignores
				taints = append(taints, pool.Spec.Template.Spec.StartupTaints...)
				taints = append(taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
			}
		} else if g.chance(0.5) {
			taints = append(taints, corev1.Taint{Key: "CriticalAddonsOnly", Value: "true", Effect: corev1.TaintEffectNoSchedule})
		}
		alloc := allocatableOf(spec)
		node := &corev1.Node{}
		node.Name = name
		node.Labels = labels
		node.Spec.Taints = taints
		node.Spec.ProviderID = "fake:///" + zone + "/" + name
		node.Status.Capacity = spec.Capacity.DeepCopy()
		node.Status.Allocatable = alloc
		en := ExistingNodeSpec{Node: node}
		// some pods of the pending workloads' kind already run here
		nb := g.pick(4)
		for j := 0; j < nb && len(ws) > 0; j++ {
			w := ws[g.pick(len(ws))]
			p := corev1.Pod{}
			p.Name = fmt.Sprintf("%s-running-%d-%d", w.name, i, j)
			p.Namespace = w.ns
			p.UID = types.UID(fmt.Sprintf("s%d-%d-b%03d", g.seed, g.idx, g.podSeq))
			g.podSeq++
			p.Labels = copyMap(w.labels)
			p.CreationTimestamp = metav1.NewTime(g.base.Add(-time.Hour))
			p.Spec = corev1.PodSpec{Containers: []corev1.Container{container(g.oneOf("100m", "250m", "500m"), g.oneOf("128Mi", "512Mi"))}}
			// keep the running copy's anti-affinity so inverse anti-affinity is exercised
			if w.template.Affinity != nil && w.template.Affinity.PodAntiAffinity != nil {
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: w.template.Affinity.PodAntiAffinity.DeepCopy()}
			}
			p.Spec.NodeName = name
			p.Status.Phase = corev1.PodRunning
			en.Pods = append(en.Pods, p)
		}
		// daemonset pods already running on the node
		for _, ds := range dss {
			if !g.chance(0.6) {
				continue
			}
			p := corev1.Pod{}
			p.Name = fmt.Sprintf("%s-%s", ds.Name, name)
			p.Namespace = ds.Namespace
			p.UID = types.UID(fmt.Sprintf("s%d-%d-d%03d", g.seed, g.idx, g.podSeq))
			g.podSeq++
			p.Labels = copyMap(ds.Spec.Template.Labels)
			p.CreationTimestamp = metav1.NewTime(g.base.Add(-time.Hour))
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr(true)}}
			p.Spec = *ds.Spec.Template.Spec.DeepCopy()
			p.Spec.NodeName = name
			p.Status.Phase = corev1.PodRunning
			en.Pods = append(en.Pods, p)
		}
		out = append(out, en)
	}
	return out
}

func indexOf(its []catalogEntry, name string) int {
	for i, c := range its {
		if c.name == name {
			return i
		}
	}
	return 0
}

func allocatableOf(spec InstanceTypeSpec) corev1.ResourceList {
	if spec.Allocatable != nil {
		return spec.Allocatable.DeepCopy()
	}
	out := spec.Capacity.DeepCopy()
	if spec.Overhead != nil {
		for _, rl := range []corev1.ResourceList{spec.Overhead.KubeReserved, spec.Overhead.SystemReserved, spec.Overhead.EvictionThreshold} {
			for k, v := range rl {
				c := out[k]
				c.Sub(v)
				out[k] = c
			}
		}
	}
	return out
}

// prunedJSON marshals v and drops what carries no information: nulls,
// empty objects and arrays (except where emptiness means something:
// "requirements":[] stays), and the "Never" that karpenter's
// NillableDuration writes for an unset expireAfter / consolidateAfter.
func prunedJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		panic(err)
	}
	x = prune(x, "")
	b, err = json.Marshal(x)
	if err != nil {
		panic(err)
	}
	return b
}

func prune(x any, key string) any {
	switch t := x.(type) {
	case map[string]any:
		for k, v := range t {
			if (k == "expireAfter" || k == "consolidateAfter") && v == "Never" && !keepNever {
				delete(t, k)
				continue
			}
			pv := prune(v, k)
			if pv == nil {
				delete(t, k)
			} else {
				t[k] = pv
			}
		}
		if len(t) == 0 {
			return nil
		}
		return t
	case []any:
		for i := range t {
			if pv := prune(t[i], ""); pv != nil {
				t[i] = pv
			} else {
				t[i] = map[string]any{}
			}
		}
		if len(t) == 0 && key != "requirements" {
			return nil
		}
		return t
	default:
		return x
	}
}
