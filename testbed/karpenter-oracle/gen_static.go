package main

// The --static-overlay part of the generator (issue #28): static NodePools
// (spec.replicas, the StaticCapacity gate) with their nodes already in the
// cluster, and NodeOverlays giving a pool's GPU types a time-sliced
// nvidia.com/gpu capacity (the NodeOverlay gate). All draws come from g.z, so
// the other streams, and every scenario without the flag, are unchanged.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
)

const (
	featStaticPool   = "static-pool"
	featNodeOverlay  = "node-overlay"
	staticStreamID   = 66601
	staticPoolShare  = 0.3
	nodeOverlayShare = 0.4
)

func (g *gen) zchance(p float64) bool { return g.z.Float64() < p }

// staticPool adds a NodePool with replicas 1-3 (no weight, sometimes a nodes
// limit, sometimes a taint) allowing one or two of the scenario's types, and
// its nodes as existing, initialized nodes: what Karpenter's static
// provisioning controller keeps. Its spare room is where pending pods may land.
func (g *gen) staticPool(sc *Scenario) {
	g.features[featStaticPool] = true
	replicas := int64(1 + g.z.Intn(3))
	name := "static"
	types := []string{g.specs[g.z.Intn(len(g.specs))].Name}
	if g.zchance(0.4) {
		types = append(types, g.specs[g.z.Intn(len(g.specs))].Name)
	}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Replicas = &replicas
	// Required by the NodePool CRD (the oracle would default it; kk-sim's reader, like the
	// API server, refuses a pool without it).
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.test.sh", Kind: "TestNodeClass", Name: "default"}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: types}}
	if g.zchance(0.3) {
		np.Spec.Limits = karpv1.Limits{"nodes": resource.MustParse(fmt.Sprint(replicas + int64(g.z.Intn(2))))}
	}
	if g.zchance(0.3) {
		np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "warm", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	sc.NodePools = append(sc.NodePools, *np)
	for i := int64(0); i < replicas; i++ {
		spec := g.specs[indexOfSpec(g.specs, types[g.z.Intn(len(types))])]
		cat := g.its[indexOf(g.its, spec.Name)]
		zone := g.zones[g.z.Intn(len(g.zones))]
		node := &corev1.Node{}
		node.Name = fmt.Sprintf("%s-%d", name, i)
		node.Labels = map[string]string{
			corev1.LabelHostname:           node.Name,
			corev1.LabelInstanceTypeStable: spec.Name,
			corev1.LabelTopologyZone:       zone,
			corev1.LabelArchStable:         cat.arch,
			corev1.LabelOSStable:           "linux",
			karpv1.CapacityTypeLabelKey:    karpv1.CapacityTypeOnDemand,
			karpv1.NodePoolLabelKey:        name,
			karpv1.NodeRegisteredLabelKey:  "true",
			karpv1.NodeInitializedLabelKey: "true",
		}
		if g.extended {
			node.Labels[labelGeneration] = generation(spec.Name)
		}
		node.Spec.Taints = np.Spec.Template.Spec.Taints
		node.Spec.ProviderID = "fake:///" + zone + "/" + node.Name
		node.Status.Capacity = spec.Capacity.DeepCopy()
		node.Status.Allocatable = allocatableOf(spec)
		sc.ExistingNodes = append(sc.ExistingNodes, ExistingNodeSpec{Node: node})
	}
}

// nodeOverlays gives one dynamic pool's GPU types a time-sliced capacity:
// nvidia.com/gpu = GPUs × 2 or 4, one overlay per type (capacities differ),
// scoped to the pool by karpenter.sh/nodepool; sometimes a second overlay of
// lower weight on all pools that the first one outranks.
func (g *gen) nodeOverlays(sc *Scenario) {
	var gpuTypes []InstanceTypeSpec
	for _, spec := range g.specs {
		if q, ok := spec.Capacity["nvidia.com/gpu"]; ok && !q.IsZero() {
			gpuTypes = append(gpuTypes, spec)
		}
	}
	var dynamic []*karpv1.NodePool
	for _, np := range g.pools {
		if np.Spec.Replicas == nil {
			dynamic = append(dynamic, np)
		}
	}
	if len(gpuTypes) == 0 || len(dynamic) == 0 {
		return
	}
	g.features[featNodeOverlay] = true
	pool := dynamic[g.z.Intn(len(dynamic))].Name
	replicas := int64(2 + 2*g.z.Intn(2))
	for _, spec := range gpuTypes {
		gpus := spec.Capacity["nvidia.com/gpu"]
		sc.NodeOverlays = append(sc.NodeOverlays, v1alpha1.NodeOverlay{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-sharing-%s", pool, spec.Name)},
			Spec: v1alpha1.NodeOverlaySpec{
				Weight: ptr(int32(10)),
				Requirements: []v1alpha1.NodeSelectorRequirement{
					{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{pool}},
					{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{spec.Name}},
				},
				Capacity: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus.Value()*replicas, resource.DecimalSI)},
			},
		})
	}
	if g.zchance(0.3) {
		sc.NodeOverlays = append(sc.NodeOverlays, v1alpha1.NodeOverlay{
			ObjectMeta: metav1.ObjectMeta{Name: "all-sharing-2"},
			Spec: v1alpha1.NodeOverlaySpec{
				Requirements: []v1alpha1.NodeSelectorRequirement{
					{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{gpuTypes[0].Name}},
				},
				Capacity: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(2, resource.DecimalSI)},
			},
		})
	}
}

func indexOfSpec(specs []InstanceTypeSpec, name string) int {
	for i, s := range specs {
		if s.Name == name {
			return i
		}
	}
	return 0
}
