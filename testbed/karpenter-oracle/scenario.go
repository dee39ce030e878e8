package main

// The scenario format shared with the Rust engine (crates/sim). Every object
// that has a Kubernetes type is Kubernetes JSON (core/v1, apps/v1,
// karpenter.sh/v1); only instance types have a format of their own, since
// Karpenter has no API object for them. docs/internals/fidelity.md documents it.

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
	"sigs.k8s.io/karpenter/pkg/operator/options"
)

// Scenario is one input to the scheduler: the cluster as Karpenter's
// provisioner would see it at the start of a scheduling loop.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Tags say which features the generator put in (informational only).
	Tags          []string           `json:"tags,omitempty"`
	NodePools     []karpv1.NodePool  `json:"nodePools"`
	InstanceTypes []InstanceTypeSpec `json:"instanceTypes"`
	// Pods are the pending pods to schedule (spec.nodeName empty).
	Pods          []corev1.Pod       `json:"pods"`
	ExistingNodes []ExistingNodeSpec `json:"existingNodes,omitempty"`
	DaemonSets    []appsv1.DaemonSet `json:"daemonSets,omitempty"`
	// PDBs are PodDisruptionBudgets (disruption scenarios; status.disruptionsAllowed is read as given).
	PDBs []policyv1.PodDisruptionBudget `json:"pdbs,omitempty"`
	// Disruption, when present, makes this a disruption scenario (see disrupt.go).
	Disruption *DisruptionSpec `json:"disruption,omitempty"`
	// NodeOverlays (karpenter.sh/v1alpha1) adjust the capacity and price of the instance types
	// they select. Giving any turns Karpenter's NodeOverlay feature gate on (alpha, off by
	// default); without them the gate stays off, as in production.
	NodeOverlays []v1alpha1.NodeOverlay `json:"nodeOverlays,omitempty"`
	// MinValuesPolicy is the controller's --min-values-policy (MIN_VALUES_POLICY): "Strict"
	// (the default, also when empty) or "BestEffort". Provisioning and disruption both see it.
	MinValuesPolicy string `json:"minValuesPolicy,omitempty"`
	// SchedulerConfig is the controller's --scheduler-config (SCHEDULER_CONFIG) document, as
	// JSON: {"podTopologySpread": {"defaultConstraints": [core/v1 TopologySpreadConstraint]}}.
	// Kept raw so that Karpenter's own options.ParseSchedulerConfiguration decodes (strictly)
	// and validates it. Absent: none, as in production without the setting.
	SchedulerConfig json.RawMessage `json:"schedulerConfig,omitempty"`
	// Services, ReplicaSets and StatefulSets are only read by the default topology-spread
	// injector (a pod's default selector comes from the Services selecting it and its
	// controlling ReplicaSet / StatefulSet, named by the pod's metadata.ownerReferences).
	Services     []corev1.Service     `json:"services,omitempty"`
	ReplicaSets  []appsv1.ReplicaSet  `json:"replicaSets,omitempty"`
	StatefulSets []appsv1.StatefulSet `json:"statefulSets,omitempty"`
}

// DisruptionSpec sets the disruption controller's clock and feature gate.
type DisruptionSpec struct {
	// Now is the controllers' clock (RFC 3339).
	Now metav1.Time `json:"now"`
	// SpotToSpot is the SpotToSpotConsolidation feature gate.
	SpotToSpot bool `json:"spotToSpot,omitempty"`
}

// InstanceTypeSpec describes one cloudprovider.InstanceType.
type InstanceTypeSpec struct {
	Name string `json:"name"`
	// Labels become `key In [value]` requirements of the instance type.
	// node.kubernetes.io/instance-type, topology.kubernetes.io/zone and
	// karpenter.sh/capacity-type are derived (from name and offerings) and
	// need not be given.
	Labels map[string]string `json:"labels,omitempty"`
	// Requirements are extra requirements (multi-valued, DoesNotExist, ...),
	// added after Labels. Optional; the generator does not use them.
	Requirements []corev1.NodeSelectorRequirement `json:"requirements,omitempty"`
	Capacity     corev1.ResourceList              `json:"capacity"`
	// Exactly one of Overhead and Allocatable may be given; with neither,
	// allocatable equals capacity.
	Overhead    *OverheadSpec       `json:"overhead,omitempty"`
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	Offerings   []OfferingSpec      `json:"offerings"`
}

type OverheadSpec struct {
	KubeReserved      corev1.ResourceList `json:"kubeReserved,omitempty"`
	SystemReserved    corev1.ResourceList `json:"systemReserved,omitempty"`
	EvictionThreshold corev1.ResourceList `json:"evictionThreshold,omitempty"`
}

type OfferingSpec struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacityType"`
	Price        float64 `json:"price"`
	// Available defaults to true when omitted. A reserved offering's
	// availability is its health only (Karpenter v1.15): a full reservation
	// is available with reservationCapacity 0.
	Available *bool `json:"available,omitempty"`
	// ReservationID, ReservationCapacity and ReservationType describe the
	// capacity reservation of a "reserved" offering (required there,
	// forbidden elsewhere): its id (karpenter.k8s.aws/capacity-reservation-id),
	// the instances still free in it, and "default" (the default) or
	// "capacity-block".
	ReservationID       string `json:"reservationID,omitempty"`
	ReservationCapacity *int   `json:"reservationCapacity,omitempty"`
	ReservationType     string `json:"reservationType,omitempty"`
}

func (o OfferingSpec) IsAvailable() bool { return o.Available == nil || *o.Available }

// ExistingNodeSpec is a node already in the cluster, with the pods bound to it.
type ExistingNodeSpec struct {
	// Node is the core/v1 Node. Karpenter-managed nodes carry the
	// karpenter.sh/nodepool label; karpenter.sh/registered and
	// karpenter.sh/initialized say how far they got.
	Node *corev1.Node `json:"node,omitempty"`
	// NodeClaim is optional. For a managed node without one, the oracle
	// synthesizes the NodeClaim that Karpenter would have (see docs/internals/fidelity.md).
	// A NodeClaim without a Node is an in-flight (launched, unregistered) node.
	NodeClaim *karpv1.NodeClaim `json:"nodeClaim,omitempty"`
	Pods      []corev1.Pod      `json:"pods,omitempty"`
}

func (e ExistingNodeSpec) Name() string {
	if e.Node != nil {
		return e.Node.Name
	}
	if e.NodeClaim != nil {
		return e.NodeClaim.Name
	}
	return ""
}

func readScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := checkKeys(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var sc Scenario
	if err := json.Unmarshal(data, &sc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := defaultConsolidateAfter(data, &sc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := sc.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &sc, nil
}

// defaultConsolidateAfter applies the NodePool CRD's default that the in-process oracle has no
// apiserver for: in Karpenter v1.15 spec.disruption.consolidateAfter defaults to "0s" (and a
// missing spec.disruption to {consolidateAfter: "0s"}). It has to look at the JSON, since
// karpenter's NillableDuration decodes an absent value and an explicit "Never" alike (nil).
func defaultConsolidateAfter(data []byte, sc *Scenario) error {
	var raw struct {
		NodePools []struct {
			Spec struct {
				Disruption struct {
					ConsolidateAfter json.RawMessage `json:"consolidateAfter"`
				} `json:"disruption"`
			} `json:"spec"`
		} `json:"nodePools"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("nodePools: %w", err)
	}
	for i := range raw.NodePools {
		if i >= len(sc.NodePools) {
			break
		}
		if v := raw.NodePools[i].Spec.Disruption.ConsolidateAfter; len(v) == 0 || string(v) == "null" {
			sc.NodePools[i].Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("0s")
		}
	}
	return nil
}

// schedulerConfiguration decodes and validates SchedulerConfig with Karpenter's own parser
// (nil when the scenario has none).
func (sc *Scenario) schedulerConfiguration() (*options.SchedulerConfiguration, error) {
	raw := strings.TrimSpace(string(sc.SchedulerConfig))
	if raw == "" || raw == "null" {
		return nil, nil
	}
	cfg, err := options.ParseSchedulerConfiguration(raw)
	if err != nil {
		return nil, fmt.Errorf("schedulerConfig: %w", err)
	}
	return cfg, nil
}

// minValuesPolicy is MinValuesPolicy with its default.
func (sc *Scenario) minValuesPolicy() (options.MinValuesPolicy, error) {
	switch p := options.MinValuesPolicy(sc.MinValuesPolicy); p {
	case "":
		return options.MinValuesPolicyStrict, nil
	case options.MinValuesPolicyStrict, options.MinValuesPolicyBestEffort:
		return p, nil
	default:
		return "", fmt.Errorf("minValuesPolicy: %q is neither %q nor %q", sc.MinValuesPolicy,
			options.MinValuesPolicyStrict, options.MinValuesPolicyBestEffort)
	}
}

// checkKeys rejects unknown fields in the parts of the format that are not
// Kubernetes objects (a misspelt "nodepools" would otherwise read as
// empty). Kubernetes objects are decoded leniently, as the apiserver does.
func checkKeys(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	if err := onlyKeys("scenario", top, "name", "description", "tags", "nodePools", "instanceTypes", "pods", "existingNodes", "daemonSets", "pdbs", "disruption", "nodeOverlays",
		"minValuesPolicy", "schedulerConfig", "services", "replicaSets", "statefulSets"); err != nil {
		return err
	}
	var its []map[string]json.RawMessage
	if raw, ok := top["instanceTypes"]; ok {
		if err := json.Unmarshal(raw, &its); err != nil {
			return fmt.Errorf("instanceTypes: %w", err)
		}
	}
	for _, it := range its {
		if err := onlyKeys("instance type", it, "name", "labels", "requirements", "capacity", "overhead", "allocatable", "offerings"); err != nil {
			return err
		}
		if raw, ok := it["overhead"]; ok {
			var oh map[string]json.RawMessage
			if err := json.Unmarshal(raw, &oh); err != nil {
				return fmt.Errorf("overhead: %w", err)
			}
			if err := onlyKeys("overhead", oh, "kubeReserved", "systemReserved", "evictionThreshold"); err != nil {
				return err
			}
		}
		var ofs []map[string]json.RawMessage
		if raw, ok := it["offerings"]; ok {
			if err := json.Unmarshal(raw, &ofs); err != nil {
				return fmt.Errorf("offerings: %w", err)
			}
		}
		for _, o := range ofs {
			if err := onlyKeys("offering", o, "zone", "capacityType", "price", "available", "reservationID", "reservationCapacity", "reservationType"); err != nil {
				return err
			}
		}
	}
	var ens []map[string]json.RawMessage
	if raw, ok := top["existingNodes"]; ok {
		if err := json.Unmarshal(raw, &ens); err != nil {
			return fmt.Errorf("existingNodes: %w", err)
		}
	}
	for _, en := range ens {
		if err := onlyKeys("existing node", en, "node", "nodeClaim", "pods"); err != nil {
			return err
		}
	}
	return nil
}

func onlyKeys(what string, m map[string]json.RawMessage, allowed ...string) error {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	for k := range m {
		if !ok[k] {
			return fmt.Errorf("unknown field %q in %s (allowed: %v)", k, what, allowed)
		}
	}
	return nil
}

func (sc *Scenario) validate() error {
	if sc.Name == "" {
		return fmt.Errorf("scenario has no name")
	}
	if _, err := sc.minValuesPolicy(); err != nil {
		return err
	}
	if _, err := sc.schedulerConfiguration(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, it := range sc.InstanceTypes {
		if it.Name == "" {
			return fmt.Errorf("instance type without name")
		}
		if seen[it.Name] {
			return fmt.Errorf("duplicate instance type %q", it.Name)
		}
		seen[it.Name] = true
		if it.Overhead != nil && it.Allocatable != nil {
			return fmt.Errorf("instance type %q: give overhead or allocatable, not both", it.Name)
		}
		for _, o := range it.Offerings {
			reserved := o.CapacityType == karpv1.CapacityTypeReserved
			described := o.ReservationID != "" || o.ReservationCapacity != nil || o.ReservationType != ""
			if reserved && (o.ReservationID == "" || o.ReservationCapacity == nil || *o.ReservationCapacity < 0) {
				return fmt.Errorf("instance type %q: a reserved offering needs reservationID and reservationCapacity >= 0", it.Name)
			}
			if !reserved && described {
				return fmt.Errorf("instance type %q: only a reserved offering has a reservation", it.Name)
			}
			if o.ReservationType != "" && o.ReservationType != "default" && o.ReservationType != "capacity-block" {
				return fmt.Errorf("instance type %q: reservationType %q is neither default nor capacity-block", it.Name, o.ReservationType)
			}
		}
	}
	names := map[string]bool{}
	for _, p := range sc.Pods {
		key := podKey(&p)
		if names[key] {
			return fmt.Errorf("duplicate pod %s", key)
		}
		names[key] = true
		if p.Spec.NodeName != "" {
			return fmt.Errorf("pending pod %s has spec.nodeName; put bound pods under existingNodes", key)
		}
	}
	for _, en := range sc.ExistingNodes {
		if en.Node == nil && en.NodeClaim == nil {
			return fmt.Errorf("existing node entry without node or nodeClaim")
		}
		for _, p := range en.Pods {
			key := podKey(&p)
			if names[key] {
				return fmt.Errorf("duplicate pod %s", key)
			}
			names[key] = true
		}
	}
	return nil
}

func podKey(p *corev1.Pod) string {
	ns := p.Namespace
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + p.Name
}

func resourceListStrings(rl corev1.ResourceList) map[string]string {
	if len(rl) == 0 {
		return nil
	}
	out := make(map[string]string, len(rl))
	for k, v := range rl {
		out[string(k)] = v.String()
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func q(s string) resource.Quantity { return resource.MustParse(s) }
