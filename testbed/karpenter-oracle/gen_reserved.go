package main

// The --reserved part of the generator: capacity reservations (On-Demand
// Capacity Reservations and capacity blocks for ML) as reserved offerings,
// NodePools that may use them, and pods that ask for them. All draws come from
// g.y, so the other streams, and every scenario without the flag, are
// unchanged.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

const (
	featReserved      = "reserved"
	featCapacityBlock = "capacity-block"
	reservedStreamID  = 88883
	// reservedShare: the part of scenarios that get reservations.
	reservedShare = 0.35
)

func (g *gen) ychance(p float64) bool { return g.y.Float64() < p }

// reservations gives one to three instance types one or two reservations
// each: 0-3 instances left (0 is a full reservation, which stays available),
// a quarter of them capacity blocks, a few unavailable; priced as the AWS
// provider prices them (on-demand / 10^7). Then it lets pools use them.
func (g *gen) reservations() {
	g.features[featReserved] = true
	n := 1 + g.y.Intn(3)
	for i := 0; i < n; i++ {
		ti := g.y.Intn(len(g.specs))
		spec := &g.specs[ti]
		zones := map[string]bool{}
		var offered []string
		var odPrice float64
		for _, o := range spec.Offerings {
			if o.CapacityType == karpv1.CapacityTypeOnDemand {
				odPrice = o.Price
			}
			if o.CapacityType != karpv1.CapacityTypeReserved && !zones[o.Zone] {
				zones[o.Zone] = true
				offered = append(offered, o.Zone)
			}
		}
		if odPrice == 0 {
			odPrice = g.its[ti].odPrice
		}
		for r := 0; r < 1+boolInt(g.ychance(0.2)); r++ {
			o := OfferingSpec{
				Zone:                offered[g.y.Intn(len(offered))],
				CapacityType:        karpv1.CapacityTypeReserved,
				Price:               odPrice / 10_000_000.0,
				ReservationID:       fmt.Sprintf("cr-%04x%02x%x", g.idx, i, r),
				ReservationCapacity: ptr(g.y.Intn(4)),
			}
			if g.ychance(0.25) {
				o.ReservationType = "capacity-block"
				g.features[featCapacityBlock] = true
			}
			if g.ychance(0.05) {
				o.Available = ptr(false)
			}
			spec.Offerings = append(spec.Offerings, o)
		}
		g.reservedTypes = append(g.reservedTypes, spec.Name)
	}
	g.reservedPools()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reservedPools: a pool of its own for the reserved types (reserved with an
// on-demand fallback, reserved only, or all three capacity types; sometimes
// capacity blocks only), or the default pool's capacity types widened to
// reserved. A pool without a capacity-type requirement already allows it.
func (g *gen) reservedPools() {
	if g.ychance(0.6) {
		np := newPool("reserved")
		types := append([]string{}, g.reservedTypes...)
		for extra := g.y.Intn(3); extra > 0; extra-- {
			types = append(types, g.specs[g.y.Intn(len(g.specs))].Name)
		}
		reqs := &np.Spec.Template.Spec.Requirements
		*reqs = append(*reqs, req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, uniq(types)...))
		switch x := g.y.Float64(); {
		case x < 0.6:
			*reqs = append(*reqs, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeReserved, karpv1.CapacityTypeOnDemand))
		case x < 0.85:
			*reqs = append(*reqs, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeReserved))
		default:
			*reqs = append(*reqs, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeReserved, karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand))
		}
		if g.ychance(0.2) {
			*reqs = append(*reqs, req(labelReservationType, corev1.NodeSelectorOpIn, "capacity-block"))
			g.features[featCapacityBlock] = true
		}
		if g.ychance(0.6) {
			np.Spec.Weight = ptr(int32(50 + g.y.Intn(50)))
		}
		if g.ychance(0.3) {
			np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "reserved", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		}
		g.pools = append(g.pools, np)
		return
	}
	for i := range g.pools[0].Spec.Template.Spec.Requirements {
		r := &g.pools[0].Spec.Template.Spec.Requirements[i]
		if r.Key == karpv1.CapacityTypeLabelKey {
			r.Values = append(r.Values, karpv1.CapacityTypeReserved)
		}
	}
}

// reservedPods: some workloads ask for reserved capacity (or tolerate the
// reserved pool's taint).
func (g *gen) reservedPods(ws []*workload) {
	for _, w := range ws {
		toleration := g.ychance(0.4)
		wantsReserved := g.ychance(0.15)
		for i := range w.pods {
			spec := &w.pods[i].Spec
			if toleration {
				spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: "reserved", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule})
			}
			if wantsReserved {
				spec.NodeSelector = merge(spec.NodeSelector, map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeReserved})
			}
		}
	}
}

func uniq(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
