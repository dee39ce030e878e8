package main

// NodeOverlay against Karpenter's own scheduler (issue #28): does a capacity overlay let the
// scheduler pack time-sliced GPU pods onto one new node, and does it replace or add to the
// instance type's capacity? The CRD's text says "adds extended resources only, and does not
// replace any existing resources"; InstanceType.ApplyCapacityOverlay is lo.Assign. These tests
// run the oracle's wiring (the operator's: overlay controller, decorated cloud provider) and
// read Karpenter's answer. `go test ./...` in this folder.

import (
	"testing"

	"github.com/samber/lo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
)

const gpu corev1.ResourceName = "nvidia.com/gpu"

// sharingScenario: one GPU pool allowing only g6.xlarge (1 L4), a generic pool, and `pods`
// pods asking one nvidia.com/gpu each, as a four-way time-sliced pool's pods do.
func sharingScenario(pods int, overlays ...v1alpha1.NodeOverlay) *Scenario {
	sc := &Scenario{Name: "overlay-sharing", NodeOverlays: overlays}
	sc.NodePools = []karpv1.NodePool{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{
			Spec: karpv1.NodeClaimTemplateSpec{
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"g6.xlarge"}}},
				Taints:       []corev1.Taint{{Key: string(gpu), Value: "present", Effect: corev1.TaintEffectNoSchedule}},
			}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{
			Spec: karpv1.NodeClaimTemplateSpec{
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"m6i.xlarge"}}},
			}}}},
	}
	sc.InstanceTypes = []InstanceTypeSpec{
		{Name: "g6.xlarge", Labels: map[string]string{corev1.LabelArchStable: "amd64"},
			Capacity:  corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi"), corev1.ResourcePods: q("58"), gpu: q("1")},
			Offerings: []OfferingSpec{{Zone: "zone-a", CapacityType: "on-demand", Price: 0.8048}}},
		{Name: "m6i.xlarge", Labels: map[string]string{corev1.LabelArchStable: "amd64"},
			Capacity:  corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi"), corev1.ResourcePods: q("58")},
			Offerings: []OfferingSpec{{Zone: "zone-a", CapacityType: "on-demand", Price: 0.192}}},
	}
	for i := range pods {
		sc.Pods = append(sc.Pods, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "infer-" + string(rune('a'+i)), Namespace: "default", UID: types.UID("uid-" + string(rune('a'+i)))},
			Spec: corev1.PodSpec{
				Tolerations: []corev1.Toleration{{Key: string(gpu), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourceMemory: q("1Gi"), gpu: q("1")},
					Limits:   corev1.ResourceList{gpu: q("1")},
				}}},
			},
		})
	}
	return sc
}

func gpuOverlay(name string, count string, reqs ...v1alpha1.NodeSelectorRequirement) v1alpha1.NodeOverlay {
	return v1alpha1.NodeOverlay{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeOverlaySpec{
			Requirements: reqs,
			Capacity:     corev1.ResourceList{gpu: resource.MustParse(count)},
		},
	}
}

func poolIs(name string) v1alpha1.NodeSelectorRequirement {
	return v1alpha1.NodeSelectorRequirement{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{name}}
}

func typeIs(name string) v1alpha1.NodeSelectorRequirement {
	return v1alpha1.NodeSelectorRequirement{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{name}}
}

func solve(t *testing.T, sc *Scenario) Outcome {
	t.Helper()
	out, _, err := solveOnce(sc, defaultRunConfig)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func podsPerClaim(out Outcome) []int {
	return lo.Map(out.NodeClaims, func(c NodeClaimOut, _ int) int { return len(c.Pods) })
}

// Without an overlay (or with the gate off, which the oracle ties to having overlays),
// Karpenter believes a new g6.xlarge offers 1 GPU: one node per time-sliced pod.
func TestNoOverlayOneNodePerSharedPod(t *testing.T) {
	out := solve(t, sharingScenario(8))
	if got := podsPerClaim(out); len(got) != 8 || lo.Max(got) != 1 {
		t.Fatalf("want 8 claims of 1 pod, got %v", got)
	}
}

// A capacity overlay nvidia.com/gpu: 4 on the pool's g6.xlarge packs four pods per node: 8 pods
// → 2 nodes. Four, not five: the overlay replaces the type's 1 GPU (lo.Assign), it does not add.
func TestCapacityOverlayReplacesAndPacks(t *testing.T) {
	out := solve(t, sharingScenario(8, gpuOverlay("gpu-sharing", "4", poolIs("gpu"), typeIs("g6.xlarge"))))
	got := podsPerClaim(out)
	if len(got) != 2 || got[0] != 4 || got[1] != 4 {
		t.Fatalf("want 2 claims of 4 pods (replace), got %v", got)
	}
	if len(out.Pending) != 0 {
		t.Fatalf("pending: %v", out.Pending)
	}
	// Five pods: 4 + 1 under replace; 5 on one node if the overlay added to the type's 1 GPU.
	out = solve(t, sharingScenario(5, gpuOverlay("gpu-sharing", "4", poolIs("gpu"))))
	if got := podsPerClaim(out); len(got) != 2 {
		t.Fatalf("want 2 claims for 5 pods (replace: 4+1), got %v", got)
	}
	// The overlaid capacity is what the decorated provider hands every NodePool it selects.
	b, err := build(sharingScenario(1, gpuOverlay("gpu-sharing", "4", poolIs("gpu"))), defaultRunConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"gpu", "default"} {
		its, err := b.cloudProvider.GetInstanceTypes(b.ctx, b.pools[pool])
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if it.Name != "g6.xlarge" {
				continue
			}
			want := lo.Ternary(pool == "gpu", int64(4), int64(1))
			c := it.Capacity[gpu]
			if c.Value() != want {
				t.Fatalf("pool %s: g6.xlarge capacity %s, want %d", pool, c.String(), want)
			}
			a := it.Allocatable()[gpu]
			if a.Value() != want {
				t.Fatalf("pool %s: g6.xlarge allocatable %s, want %d", pool, a.String(), want)
			}
		}
	}
}

// An overlay selecting another NodePool leaves this one alone.
func TestOverlayForAnotherPoolDoesNotApply(t *testing.T) {
	out := solve(t, sharingScenario(4, gpuOverlay("gpu-sharing", "4", poolIs("other"))))
	if got := podsPerClaim(out); len(got) != 4 {
		t.Fatalf("want 4 claims, got %v", got)
	}
}

// A pool's nvidia.com/gpu limit is charged the overlaid capacity per new claim (subtractMax):
// limit 8 → two claims of 4, the ninth pod waits.
func TestOverlaidCapacityCountsAgainstLimits(t *testing.T) {
	sc := sharingScenario(9, gpuOverlay("gpu-sharing", "4", poolIs("gpu")))
	sc.NodePools[0].Spec.Limits = karpv1.Limits{gpu: q("8")}
	out := solve(t, sc)
	got := podsPerClaim(out)
	gpuClaims := lo.Filter(out.NodeClaims, func(c NodeClaimOut, _ int) bool { return c.NodePool == "gpu" })
	if len(gpuClaims) != 2 || len(out.Pending) != 1 {
		t.Fatalf("want 2 gpu claims and 1 pending, got %v, pending %v", got, out.Pending)
	}
}

// A price overlay changes the price the scheduler orders by.
func TestPriceOverlay(t *testing.T) {
	overlay := v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "cheap"}, Spec: v1alpha1.NodeOverlaySpec{
		Requirements: []v1alpha1.NodeSelectorRequirement{poolIs("gpu")}, PriceAdjustment: lo.ToPtr("-50%")}}
	out := solve(t, sharingScenario(1, overlay))
	if len(out.NodeClaims) != 1 || out.NodeClaims[0].Price != 0.4024 {
		t.Fatalf("want one claim at 0.4024, got %+v", out.NodeClaims)
	}
}
