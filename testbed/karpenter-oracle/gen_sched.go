package main

// The --scheduler-settings part of the generator (issue #49): the controller settings
// --min-values-policy=BestEffort (with NodePool minValues that the pool's types sometimes cannot
// meet) and --scheduler-config default topology-spread constraints (with the ReplicaSets,
// StatefulSets and Services that a pod's default selector is deduced from). All draws come from
// g.sched, a stream of its own, so the other streams, and every scenario without the flag, are
// unchanged.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/karpenter/pkg/operator/options"
)

const (
	featMinValuesBestEffort  = "min-values-best-effort"
	featDefaultSpread        = "default-topology-spread"
	schedStreamID            = 44449
	minValuesBestEffortShare = 0.2
	defaultSpreadShare       = 0.2
	// labelInstanceFamily is the AWS provider's family label (c6i.large: c6i); the generator puts
	// it on every instance type (and node) of a scenario whose minValues use it.
	labelInstanceFamily  = "karpenter.k8s.aws/instance-family"
	labelPodTemplateHash = "pod-template-hash"
)

// schedPlan is what --scheduler-settings decided for a scenario (the first two draws of g.sched).
type schedPlan struct {
	minValues, spread bool
	family            bool // minValues use labelInstanceFamily: label the existing nodes too
}

func (g *gen) schedChance(p float64) bool { return g.sched.Float64() < p }

func (g *gen) schedulerSettingsPlan() schedPlan {
	return schedPlan{minValues: g.schedChance(minValuesBestEffortShare), spread: g.schedChance(defaultSpreadShare)}
}

func familyOf(name string) string {
	if i := strings.IndexByte(name, '.'); i > 0 {
		return name[:i]
	}
	return name
}

// minValuesBestEffort sets minValuesPolicy BestEffort and puts minValues on the instance-type or
// instance-family key of the default pool and, each with probability 1/2, of the other pools:
// half of them more than the scenario's types offer (never satisfiable: BestEffort relaxes them),
// half small (satisfiable unless the pool's or the pods' requirements narrow the types).
func (g *gen) minValuesBestEffort(sc *Scenario, plan *schedPlan) {
	sc.MinValuesPolicy = string(options.MinValuesPolicyBestEffort)
	g.features[featMinValuesBestEffort] = true
	key := corev1.LabelInstanceTypeStable
	distinct := len(g.specs)
	if g.schedChance(0.4) {
		plan.family = true
		key = labelInstanceFamily
		fams := map[string]bool{}
		for i := range g.specs {
			f := familyOf(g.specs[i].Name)
			g.specs[i].Labels[labelInstanceFamily] = f
			fams[f] = true
		}
		distinct = len(fams)
	}
	for i, np := range g.pools {
		if np.Spec.Replicas != nil || (i > 0 && !g.schedChance(0.5)) {
			continue
		}
		var n int
		if g.schedChance(0.5) {
			n = distinct + 1 + g.sched.Intn(2)
		} else {
			n = 1 + g.sched.Intn(min(distinct, 3))
		}
		reqs := &np.Spec.Template.Spec.Requirements
		found := false
		for j := range *reqs {
			r := &(*reqs)[j]
			if r.Key != key {
				continue
			}
			// minValues on an In needs that many values (the CRD's rule); on a NotIn, a
			// requirement of its own
			if r.Operator == corev1.NodeSelectorOpExists || (r.Operator == corev1.NodeSelectorOpIn && len(r.Values) >= n) {
				r.MinValues = ptr(n)
				found = true
				break
			}
		}
		if !found {
			r := req(key, corev1.NodeSelectorOpExists)
			r.MinValues = ptr(n)
			*reqs = append(*reqs, r)
		}
	}
}

// defaultSpread sets a scheduler config with one or two default constraints (zone and/or
// hostname, maxSkew 1-3, DoNotSchedule or ScheduleAnyway) and gives the workloads whose pods have
// no topologySpreadConstraints of their own a controller: a ReplicaSet (two, as in a rollout,
// sometimes), a StatefulSet, or none; the running copies of a workload's pods on existing nodes
// mostly share its first owner. Half the scenarios also get one or two Services selecting a
// workload's pods (by app) or a tier.
func (g *gen) defaultSpread(sc *Scenario, ws []*workload) {
	g.features[featDefaultSpread] = true
	r := g.sched
	mk := func(key string) corev1.TopologySpreadConstraint {
		when := corev1.DoNotSchedule
		if g.schedChance(0.5) {
			when = corev1.ScheduleAnyway
		}
		return corev1.TopologySpreadConstraint{MaxSkew: int32(1 + r.Intn(3)), TopologyKey: key, WhenUnsatisfiable: when}
	}
	var tscs []corev1.TopologySpreadConstraint
	switch r.Intn(3) {
	case 0:
		tscs = append(tscs, mk(corev1.LabelTopologyZone))
	case 1:
		tscs = append(tscs, mk(corev1.LabelHostname))
	default:
		tscs = append(tscs, mk(corev1.LabelTopologyZone), mk(corev1.LabelHostname))
	}
	raw, err := json.Marshal(options.SchedulerConfiguration{PodTopologySpread: &options.PodTopologySpreadConfig{DefaultConstraints: tscs}})
	if err != nil {
		panic(err)
	}
	sc.SchedulerConfig = raw

	controller := func(kind, name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr(true)}
	}
	running := func(w *workload) []*corev1.Pod {
		var out []*corev1.Pod
		for i := range sc.ExistingNodes {
			for j := range sc.ExistingNodes[i].Pods {
				p := &sc.ExistingNodes[i].Pods[j]
				if p.Namespace == w.ns && strings.HasPrefix(p.Name, w.name+"-running-") {
					out = append(out, p)
				}
			}
		}
		return out
	}
	for _, w := range ws {
		if len(w.pods) == 0 || len(w.template.TopologySpreadConstraints) > 0 {
			continue
		}
		x := r.Float64()
		switch {
		case x < 0.45:
			// ReplicaSets: selector app + pod-template-hash, as a Deployment's
			sets := 1
			if len(w.pods) >= 2 && g.schedChance(0.25) {
				sets = 2
			}
			split := len(w.pods)
			if sets == 2 {
				split = 1 + r.Intn(len(w.pods)-1)
			}
			var first metav1.OwnerReference
			var firstHash string
			for s := 0; s < sets; s++ {
				hash := fmt.Sprintf("%06x", r.Intn(1<<24))
				name := w.name + "-" + hash
				uid := types.UID(fmt.Sprintf("replicaset-%s-%s", w.ns, name))
				pods := w.pods[:split]
				if s == 1 {
					pods = w.pods[split:]
				}
				labels := merge(copyMap(w.labels), map[string]string{labelPodTemplateHash: hash})
				rs := appsv1.ReplicaSet{}
				rs.Name, rs.Namespace, rs.UID = name, w.ns, uid
				rs.Spec.Replicas = ptr(int32(len(pods)))
				rs.Status.Replicas = int32(len(pods))
				rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name, labelPodTemplateHash: hash}}
				rs.Spec.Template.Labels = labels
				sc.ReplicaSets = append(sc.ReplicaSets, rs)
				ref := controller("ReplicaSet", name, uid)
				for i := range pods {
					pods[i].Labels = merge(pods[i].Labels, map[string]string{labelPodTemplateHash: hash})
					pods[i].OwnerReferences = []metav1.OwnerReference{ref}
				}
				if s == 0 {
					first, firstHash = ref, hash
				}
			}
			for _, p := range running(w) {
				if g.schedChance(0.7) {
					p.Labels = merge(p.Labels, map[string]string{labelPodTemplateHash: firstHash})
					p.OwnerReferences = []metav1.OwnerReference{first}
				}
			}
		case x < 0.75:
			uid := types.UID(fmt.Sprintf("statefulset-%s-%s", w.ns, w.name))
			ss := appsv1.StatefulSet{}
			ss.Name, ss.Namespace, ss.UID = w.name, w.ns, uid
			ss.Spec.Replicas = ptr(int32(len(w.pods)))
			ss.Status.Replicas = int32(len(w.pods))
			ss.Spec.ServiceName = w.name
			ss.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}
			ss.Spec.Template.Labels = copyMap(w.labels)
			sc.StatefulSets = append(sc.StatefulSets, ss)
			ref := controller("StatefulSet", w.name, uid)
			for i := range w.pods {
				w.pods[i].OwnerReferences = []metav1.OwnerReference{ref}
			}
			for _, p := range running(w) {
				if g.schedChance(0.7) {
					p.OwnerReferences = []metav1.OwnerReference{ref}
				}
			}
		}
	}
	if g.schedChance(0.5) {
		n := 1 + r.Intn(2)
		for i := 0; i < n; i++ {
			svc := corev1.Service{}
			svc.Name = fmt.Sprintf("svc-%d", i)
			svc.Namespace = "default"
			w := ws[r.Intn(len(ws))]
			if tier := w.labels["tier"]; tier != "" && g.schedChance(0.3) {
				svc.Spec.Selector = map[string]string{"tier": tier}
			} else {
				svc.Spec.Selector = map[string]string{"app": w.name}
			}
			svc.Namespace = w.ns
			svc.UID = types.UID(fmt.Sprintf("service-%s-%s", svc.Namespace, svc.Name))
			sc.Services = append(sc.Services, svc)
		}
	}
	sort.SliceStable(sc.ReplicaSets, func(i, j int) bool { return sc.ReplicaSets[i].Name < sc.ReplicaSets[j].Name })
}

// labelNodeFamilies gives existing nodes the family label their types got.
func labelNodeFamilies(sc *Scenario) {
	for i := range sc.ExistingNodes {
		if n := sc.ExistingNodes[i].Node; n != nil {
			if it := n.Labels[corev1.LabelInstanceTypeStable]; it != "" {
				n.Labels[labelInstanceFamily] = familyOf(it)
			}
		}
	}
}
