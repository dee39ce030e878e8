package main

// The oracle: Karpenter's own provisioning scheduler (sigs.k8s.io/karpenter
// v1.15.0) run in-process, wired as Provisioner.Schedule wires it, against a
// controller-runtime fake client, Karpenter's cluster state and the fake
// cloud provider. No apiserver. See docs/internals/fidelity.md "The oracle".

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/awslabs/operatorpkg/object"
	"github.com/samber/lo"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeoverlay"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning"
	scheduler "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/state/virtualpods"
	"sigs.k8s.io/karpenter/pkg/test"
	testv1alpha1 "sigs.k8s.io/karpenter/pkg/test/v1alpha1"
	podutils "sigs.k8s.io/karpenter/pkg/utils/pod"
)

func init() {
	crlog.SetLogger(logging.NopLogger)
	// Importing the fake cloud provider registers three extra "well-known"
	// labels (fake.LabelInstanceSize, ExoticInstanceLabelKey,
	// IntegerInstanceLabelKey) in karpv1.WellKnownLabels. Undo that so the
	// oracle has core Karpenter's set of well-known labels.
	// The fake cloud provider's init also registers its reservation-id label
	// (testv1alpha1.LabelReservationID); reserved offerings use the AWS
	// provider's three capacity-reservation labels instead, registered as the
	// AWS provider registers them (well-known, and reserved-capacity labels).
	karpv1.WellKnownLabels.Delete(fake.LabelInstanceSize, fake.ExoticInstanceLabelKey, fake.IntegerInstanceLabelKey,
		testv1alpha1.LabelReservationID)
	cloudprovider.ReservedCapacityLabels.Delete(testv1alpha1.LabelReservationID)
	cloudprovider.ReservationIDLabel = labelReservationID
	karpv1.WellKnownLabels.Insert(reservationLabels...)
	cloudprovider.ReservedCapacityLabels.Insert(reservationLabels...)
}

// The AWS provider's capacity-reservation labels (karpenter-provider-aws
// pkg/apis/v1 labels.go).
const (
	labelReservationID            = "karpenter.k8s.aws/capacity-reservation-id"
	labelReservationType          = "karpenter.k8s.aws/capacity-reservation-type"
	labelReservationInterruptible = "karpenter.k8s.aws/capacity-reservation-interruptible"
)

var reservationLabels = []string{labelReservationID, labelReservationType, labelReservationInterruptible}

// RunConfig holds the knobs of one oracle run.
type RunConfig struct {
	// CPURequests is the controller's --cpu-requests in millicores; the
	// provisioner passes NumConcurrentReconciles(ceil(CPURequests/1000)).
	// Production default 1000 (one worker); upstream's benchmark uses 5.
	CPURequests int64
	// SolveTimeout bounds Solve like Provisioner.Schedule does (1 minute in
	// production); 0 means no deadline (the upstream benchmark has none).
	SolveTimeout time.Duration
	// Clock is the controllers' clock (nil: the real one). The disruption
	// oracle sets a fake clock at the scenario's "now".
	Clock clock.Clock
	// IndexPods serves "pods on node X" from a map, as the informer cache's
	// index does, instead of the fake client's list-and-filter (which copies
	// every pod per call and dominates at thousands of nodes). Benchmarks only.
	IndexPods bool
	// ExtraRuns: when the first solves of a scenario disagree, solve it up
	// to this many more times, so nondeterministic scenarios record more of
	// their outcomes without solving every scenario that often.
	ExtraRuns int
	// MaxVariants caps the alternative outcomes kept in a result.
	MaxVariants int
}

var defaultRunConfig = RunConfig{CPURequests: 1000, SolveTimeout: time.Minute, MaxVariants: defaultMaxVariants}

// nodeClassGK is the NodeClass kind of the fake cloud provider; every
// NodePool's nodeClassRef is pointed at it so nodepoolutils.ListManaged
// keeps it.
var nodeClassGK = object.GVK(&testv1alpha1.TestNodeClass{}).GroupKind()

// built is one scenario turned into Karpenter objects (fresh for every run:
// the scheduler mutates what it is given).
type built struct {
	ctx        context.Context
	kubeClient client.Client
	// cloudProvider is the fake cloud provider, decorated with the NodeOverlay store when the
	// scenario has overlays (as Karpenter's operator decorates its provider).
	cloudProvider cloudprovider.CloudProvider
	cluster       *state.Cluster
	provisioner   *provisioning.Provisioner
	pendingPods   []*corev1.Pod // as given, after defaulting
	// For the disruption oracle.
	nodeClaims []*karpv1.NodeClaim
	pools      map[string]*karpv1.NodePool
	clock      clock.Clock
}

func buildInstanceType(spec InstanceTypeSpec) (*cloudprovider.InstanceType, error) {
	offerings := cloudprovider.Offerings{}
	// As the AWS provider builds them (pkg/providers/instancetype/offering):
	// a reserved offering carries its reservation's id, type and
	// interruptible labels; every other offering, and a type without
	// reservations, has them as DoesNotExist.
	reservationValues := [3][]string{}
	for _, o := range spec.Offerings {
		if o.Zone == "" || o.CapacityType == "" {
			return nil, fmt.Errorf("instance type %s: offering needs zone and capacityType", spec.Name)
		}
		reqs := scheduling.NewLabelRequirements(map[string]string{
			karpv1.CapacityTypeLabelKey: o.CapacityType,
			corev1.LabelTopologyZone:    o.Zone,
		})
		offering := &cloudprovider.Offering{Price: o.Price, Available: o.IsAvailable()}
		if o.CapacityType == karpv1.CapacityTypeReserved {
			values := [3]string{o.ReservationID, lo.Ternary(o.ReservationType == "", "default", o.ReservationType), "false"}
			for i, key := range reservationLabels {
				reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpIn, values[i]))
				reservationValues[i] = append(reservationValues[i], values[i])
			}
			offering.ReservationCapacity = lo.FromPtr(o.ReservationCapacity)
		} else {
			for _, key := range reservationLabels {
				reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpDoesNotExist))
			}
		}
		offering.Requirements = reqs
		offerings = append(offerings, offering)
	}
	reqs := scheduling.NewRequirements()
	for _, k := range sortedKeys(spec.Labels) {
		reqs.Add(scheduling.NewRequirement(k, corev1.NodeSelectorOpIn, spec.Labels[k]))
	}
	for _, r := range spec.Requirements {
		reqs.Add(scheduling.NewRequirement(r.Key, r.Operator, r.Values...))
	}
	for i, key := range reservationLabels {
		if len(reservationValues[i]) == 0 {
			reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpDoesNotExist))
		} else {
			reqs.Add(scheduling.NewRequirement(key, corev1.NodeSelectorOpIn, lo.Uniq(reservationValues[i])...))
		}
	}
	// Derived requirements, as the fake (and AWS) cloud provider build them:
	// the name, and zone / capacity type from the available offerings.
	available := offerings.Available()
	reqs.Add(scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, spec.Name))
	reqs.Add(scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn,
		lo.Uniq(lo.Map(available, func(o *cloudprovider.Offering, _ int) string { return o.Zone() }))...))
	reqs.Add(scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn,
		lo.Uniq(lo.Map(available, func(o *cloudprovider.Offering, _ int) string { return o.CapacityType() }))...))

	capacity := spec.Capacity.DeepCopy()
	if capacity == nil {
		capacity = corev1.ResourceList{}
	}
	overhead := &cloudprovider.InstanceTypeOverhead{}
	switch {
	case spec.Overhead != nil:
		overhead.KubeReserved = spec.Overhead.KubeReserved.DeepCopy()
		overhead.SystemReserved = spec.Overhead.SystemReserved.DeepCopy()
		overhead.EvictionThreshold = spec.Overhead.EvictionThreshold.DeepCopy()
	case spec.Allocatable != nil:
		// Express allocatable as kubeReserved = capacity - allocatable, so
		// that InstanceType.Allocatable() returns it.
		overhead.KubeReserved = corev1.ResourceList{}
		for name, c := range capacity {
			a, ok := spec.Allocatable[name]
			if !ok {
				continue
			}
			d := c.DeepCopy()
			d.Sub(a)
			if d.Sign() < 0 {
				return nil, fmt.Errorf("instance type %s: allocatable %s > capacity", spec.Name, name)
			}
			overhead.KubeReserved[name] = d
		}
	}
	return &cloudprovider.InstanceType{
		Name:         spec.Name,
		Requirements: reqs,
		Offerings:    offerings,
		Capacity:     capacity,
		Overhead:     overhead,
	}, nil
}

func defaultNamespace(om *metav1.ObjectMeta, ns string) {
	if om.Namespace == "" {
		om.Namespace = ns
	}
}

func defaultUID(om *metav1.ObjectMeta, kind string) {
	if om.UID == "" {
		om.UID = types.UID(fmt.Sprintf("%s-%s-%s", kind, om.Namespace, om.Name))
	}
}

// markPending gives a pod the status kube-scheduler leaves on a pod it could
// not place, which is what Karpenter's GetPendingPods looks for.
func markPending(p *corev1.Pod) {
	if p.Status.Phase == "" {
		p.Status.Phase = corev1.PodPending
	}
	if !lo.ContainsBy(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled }) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type:   corev1.PodScheduled,
			Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable,
		})
	}
}

func setNodePoolReady(np *karpv1.NodePool) {
	np.Status.Conditions = nil
	np.StatusConditions().SetTrue(karpv1.ConditionTypeValidationSucceeded)
	np.StatusConditions().SetTrue(karpv1.ConditionTypeNodeClassReady)
	np.StatusConditions().SetTrue(karpv1.ConditionTypeNodeRegistrationHealthy)
}

// synthesizeNodeClaim builds the NodeClaim Karpenter would have for a
// managed node: same labels, the node's taints minus the pool's startup
// taints as spec.taints, the pool's startup taints, the node's capacity and
// allocatable, and the providerID linking the two.
func synthesizeNodeClaim(node *corev1.Node, pools map[string]*karpv1.NodePool) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:   node.Name,
			UID:    types.UID("nodeclaim-" + node.Name),
			Labels: lo.Assign(node.Labels),
		},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: nodeClassGK.Group, Kind: nodeClassGK.Kind, Name: "default"},
		},
		Status: karpv1.NodeClaimStatus{
			ProviderID:  node.Spec.ProviderID,
			NodeName:    node.Name,
			Capacity:    node.Status.Capacity.DeepCopy(),
			Allocatable: node.Status.Allocatable.DeepCopy(),
		},
	}
	var startup []corev1.Taint
	if np, ok := pools[node.Labels[karpv1.NodePoolLabelKey]]; ok {
		startup = np.Spec.Template.Spec.StartupTaints
		nc.Spec.Taints = np.Spec.Template.Spec.Taints
		nc.Spec.Requirements = np.Spec.Template.Spec.Requirements
	}
	nc.Spec.StartupTaints = startup
	nc.StatusConditions().SetTrue(karpv1.ConditionTypeLaunched)
	if node.Labels[karpv1.NodeRegisteredLabelKey] == "true" {
		nc.StatusConditions().SetTrue(karpv1.ConditionTypeRegistered)
	}
	if node.Labels[karpv1.NodeInitializedLabelKey] == "true" {
		nc.StatusConditions().SetTrue(karpv1.ConditionTypeInitialized)
	}
	return nc
}

func build(sc *Scenario, cfg RunConfig) (*built, error) {
	optsFields := test.OptionsFields{CPURequests: lo.ToPtr(cfg.CPURequests)}
	if len(sc.NodeOverlays) > 0 {
		optsFields.FeatureGates.NodeOverlay = lo.ToPtr(true)
	}
	// --min-values-policy and --scheduler-config: the scheduler reads both from the options on
	// the context (provisioning, and disruption's simulations through the same provisioner).
	policy, err := sc.minValuesPolicy()
	if err != nil {
		return nil, err
	}
	optsFields.MinValuesPolicy = lo.ToPtr(policy)
	schedCfg, err := sc.schedulerConfiguration()
	if err != nil {
		return nil, err
	}
	optsFields.SchedulerConfig = schedCfg
	opts := test.Options(optsFields)
	ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), opts)

	its := make([]*cloudprovider.InstanceType, 0, len(sc.InstanceTypes))
	for _, spec := range sc.InstanceTypes {
		it, err := buildInstanceType(spec)
		if err != nil {
			return nil, err
		}
		its = append(its, it)
	}
	cp := fake.NewCloudProvider()
	cp.InstanceTypes = its

	namespaces := sets.New[string]()
	var objs []client.Object

	pools := map[string]*karpv1.NodePool{}
	for i := range sc.NodePools {
		np := sc.NodePools[i].DeepCopy()
		if np.Spec.Template.Spec.NodeClassRef == nil {
			np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Name: "default"}
		}
		np.Spec.Template.Spec.NodeClassRef.Group = nodeClassGK.Group
		np.Spec.Template.Spec.NodeClassRef.Kind = nodeClassGK.Kind
		if np.UID == "" {
			np.UID = types.UID("nodepool-" + np.Name)
		}
		np.ResourceVersion = ""
		setNodePoolReady(np)
		pools[np.Name] = np
		objs = append(objs, np)
	}

	var nodes []*corev1.Node
	var nodeClaims []*karpv1.NodeClaim
	var boundPods []*corev1.Pod
	for _, en := range sc.ExistingNodes {
		var node *corev1.Node
		if en.Node != nil {
			node = en.Node.DeepCopy()
			node.ResourceVersion = ""
			if node.UID == "" {
				node.UID = types.UID("node-" + node.Name)
			}
			managed := node.Labels[karpv1.NodePoolLabelKey] != ""
			if node.Spec.ProviderID == "" && managed {
				// Cluster.UpdateNode ignores managed nodes without one.
				node.Spec.ProviderID = "fake:///" + node.Name
			}
			nodes = append(nodes, node)
			objs = append(objs, node)
		}
		var nc *karpv1.NodeClaim
		switch {
		case en.NodeClaim != nil:
			nc = en.NodeClaim.DeepCopy()
			nc.ResourceVersion = ""
			if nc.UID == "" {
				nc.UID = types.UID("nodeclaim-" + nc.Name)
			}
			if nc.Spec.NodeClassRef == nil {
				nc.Spec.NodeClassRef = &karpv1.NodeClassReference{Name: "default"}
			}
			nc.Spec.NodeClassRef.Group = nodeClassGK.Group
			nc.Spec.NodeClassRef.Kind = nodeClassGK.Kind
			if node != nil && nc.Status.ProviderID == "" {
				nc.Status.ProviderID = node.Spec.ProviderID
			}
			if nc.Status.ProviderID == "" {
				nc.Status.ProviderID = "fake:///" + nc.Name
			}
		case node != nil && node.Labels[karpv1.NodePoolLabelKey] != "":
			nc = synthesizeNodeClaim(node, pools)
		}
		if nc != nil {
			nodeClaims = append(nodeClaims, nc)
			objs = append(objs, nc)
		}
		for i := range en.Pods {
			p := en.Pods[i].DeepCopy()
			p.ResourceVersion = ""
			defaultNamespace(&p.ObjectMeta, "default")
			defaultUID(&p.ObjectMeta, "pod")
			if p.Spec.NodeName == "" {
				p.Spec.NodeName = en.Name()
			}
			if p.Status.Phase == "" {
				p.Status.Phase = corev1.PodRunning
			}
			namespaces.Insert(p.Namespace)
			boundPods = append(boundPods, p)
			objs = append(objs, p)
		}
	}

	var pending []*corev1.Pod
	for i := range sc.Pods {
		p := sc.Pods[i].DeepCopy()
		p.ResourceVersion = ""
		defaultNamespace(&p.ObjectMeta, "default")
		defaultUID(&p.ObjectMeta, "pod")
		markPending(p)
		namespaces.Insert(p.Namespace)
		pending = append(pending, p)
		objs = append(objs, p)
	}

	for i := range sc.NodeOverlays {
		overlay := sc.NodeOverlays[i].DeepCopy()
		overlay.ResourceVersion = ""
		if overlay.UID == "" {
			overlay.UID = types.UID("nodeoverlay-" + overlay.Name)
		}
		objs = append(objs, overlay)
	}
	var daemonSets []*appsv1.DaemonSet
	for i := range sc.DaemonSets {
		ds := sc.DaemonSets[i].DeepCopy()
		ds.ResourceVersion = ""
		defaultNamespace(&ds.ObjectMeta, "default")
		defaultUID(&ds.ObjectMeta, "daemonset")
		namespaces.Insert(ds.Namespace)
		daemonSets = append(daemonSets, ds)
		objs = append(objs, ds)
	}
	for i := range sc.PDBs {
		pdb := sc.PDBs[i].DeepCopy()
		pdb.ResourceVersion = ""
		defaultNamespace(&pdb.ObjectMeta, "default")
		defaultUID(&pdb.ObjectMeta, "pdb")
		objs = append(objs, pdb)
	}
	// Services, ReplicaSets and StatefulSets: read (only) by the default topology-spread
	// injector. Pods name their controller by ownerReferences; one that leaves the uid empty
	// gets the uid of the owner it names, so the injector's per-owner cache (keyed by uid)
	// never lumps two owners together.
	ownerUIDs := map[string]types.UID{}
	for i := range sc.Services {
		svc := sc.Services[i].DeepCopy()
		svc.ResourceVersion = ""
		defaultNamespace(&svc.ObjectMeta, "default")
		defaultUID(&svc.ObjectMeta, "service")
		namespaces.Insert(svc.Namespace)
		objs = append(objs, svc)
	}
	for i := range sc.ReplicaSets {
		rs := sc.ReplicaSets[i].DeepCopy()
		rs.ResourceVersion = ""
		defaultNamespace(&rs.ObjectMeta, "default")
		defaultUID(&rs.ObjectMeta, "replicaset")
		ownerUIDs["ReplicaSet/"+rs.Namespace+"/"+rs.Name] = rs.UID
		namespaces.Insert(rs.Namespace)
		objs = append(objs, rs)
	}
	for i := range sc.StatefulSets {
		ss := sc.StatefulSets[i].DeepCopy()
		ss.ResourceVersion = ""
		defaultNamespace(&ss.ObjectMeta, "default")
		defaultUID(&ss.ObjectMeta, "statefulset")
		ownerUIDs["StatefulSet/"+ss.Namespace+"/"+ss.Name] = ss.UID
		namespaces.Insert(ss.Namespace)
		objs = append(objs, ss)
	}
	for _, p := range append(append([]*corev1.Pod{}, boundPods...), pending...) {
		for j := range p.OwnerReferences {
			ref := &p.OwnerReferences[j]
			if ref.APIVersion != "apps/v1" {
				continue
			}
			uid, ok := ownerUIDs[ref.Kind+"/"+p.Namespace+"/"+ref.Name]
			switch {
			case !ok:
			case ref.UID == "":
				ref.UID = uid
			case ref.UID != uid:
				return nil, fmt.Errorf("pod %s: ownerReference %s/%s has uid %q, the %s has %q", podKey(p), ref.Kind, ref.Name, ref.UID, ref.Kind, uid)
			}
		}
	}
	for _, ns := range sets.List(namespaces) {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:   ns,
			UID:    types.UID("namespace-" + ns),
			Labels: map[string]string{corev1.LabelMetadataName: ns}, // as the apiserver sets it
		}})
	}

	// Field indexes that Karpenter's controllers register on the manager's
	// cache (operator.go); the fake client needs them for MatchingFields.
	var kubeClient client.Client = fakecr.NewClientBuilder().
		WithScheme(scheme.Scheme).
		WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.NodeOverlay{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
			return []string{o.(*corev1.Pod).Spec.NodeName}
		}).
		WithIndex(&corev1.Node{}, "spec.providerID", func(o client.Object) []string {
			return []string{o.(*corev1.Node).Spec.ProviderID}
		}).
		WithIndex(&karpv1.NodeClaim{}, "status.providerID", func(o client.Object) []string {
			return []string{o.(*karpv1.NodeClaim).Status.ProviderID}
		}).
		Build()
	if cfg.IndexPods {
		kubeClient = newPodIndexClient(kubeClient, boundPods)
	}

	var clk clock.Clock = &clock.RealClock{}
	if cfg.Clock != nil {
		clk = cfg.Clock
	}
	// As the operator wires it (kwok/main.go): the NodeOverlay store, the provider decorated
	// with it for everything that schedules, and the overlay controller, which reads the
	// undecorated provider, validates every overlay and fills the store. One Reconcile is what
	// the controller does when the overlays or NodePools change.
	var provider cloudprovider.CloudProvider = cp
	var store *nodeoverlay.InstanceTypeStore
	if len(sc.NodeOverlays) > 0 {
		store = nodeoverlay.NewInstanceTypeStore()
		provider = overlay.Decorate(cp, kubeClient, store)
	}
	cluster := state.NewCluster(clk, kubeClient, provider)
	if store != nil {
		if _, err := nodeoverlay.NewController(clk, kubeClient, cp, store, cluster).Reconcile(ctx, reconcile.Request{}); err != nil {
			return nil, fmt.Errorf("nodeoverlay controller: %w", err)
		}
	}
	// Feed cluster state the way its informers would.
	for _, nc := range nodeClaims {
		cluster.UpdateNodeClaim(nc)
	}
	for _, n := range nodes {
		if err := cluster.UpdateNode(ctx, n); err != nil {
			return nil, fmt.Errorf("cluster.UpdateNode(%s): %w", n.Name, err)
		}
	}
	for _, p := range boundPods {
		if err := cluster.UpdatePod(ctx, p); err != nil {
			return nil, fmt.Errorf("cluster.UpdatePod(%s): %w", podKey(p), err)
		}
	}
	for _, ds := range daemonSets {
		if err := cluster.UpdateDaemonSet(ctx, ds); err != nil {
			return nil, fmt.Errorf("cluster.UpdateDaemonSet(%s): %w", ds.Name, err)
		}
	}
	recorder := events.NewRecorder(&record.FakeRecorder{})
	prov := provisioning.NewProvisioner(kubeClient, recorder, provider, cluster, clk, nil, virtualpods.NewVirtualPodCache(kubeClient))
	return &built{
		nodeClaims:    nodeClaims,
		pools:         pools,
		clock:         clk,
		ctx:           ctx,
		kubeClient:    kubeClient,
		cloudProvider: provider,
		cluster:       cluster,
		provisioner:   prov,
		pendingPods:   pending,
	}, nil
}

// solveOnce runs one scheduling simulation the way Provisioner.Schedule
// does (minus creating node claims and recording events), and returns the
// canonical outcome and Solve's wall time.
func solveOnce(sc *Scenario, cfg RunConfig) (Outcome, time.Duration, error) {
	b, err := build(sc, cfg)
	if err != nil {
		return Outcome{}, 0, err
	}
	ctx := b.ctx
	opts := options.FromContext(ctx)

	// Schedule(): nodes first, then pending pods.
	nodes := b.cluster.DeepCopyNodes()
	pods, err := b.provisioner.GetPendingPods(ctx)
	if err != nil {
		return Outcome{}, 0, fmt.Errorf("GetPendingPods: %w", err)
	}
	out := Outcome{NodeClaims: []NodeClaimOut{}, ExistingNodes: []ExistingNodeOut{}, Pending: []PendingOut{}}
	// Pods GetPendingPods dropped: not provisionable, or failing Validate.
	accepted := sets.New(lo.Map(pods, func(p *corev1.Pod, _ int) types.UID { return p.UID })...)
	for _, p := range b.pendingPods {
		if accepted.Has(p.UID) {
			continue
		}
		msg := "not provisionable"
		if podutils.IsProvisionable(p) {
			if verr := b.provisioner.Validate(ctx, p); verr != nil {
				msg = fmt.Sprintf("ignoring pod, %s", verr)
			}
		}
		out.Pending = append(out.Pending, PendingOut{Pod: podKey(p), Error: normalizeError(msg)})
	}
	// The fake client lists in key order; the apiserver's cache order is
	// unspecified. Karpenter's queue sorts anyway (CPU, memory, creation
	// time, UID), so this order only matters for ties it cannot see.
	sort.SliceStable(pods, func(i, j int) bool { return podKey(pods[i]) < podKey(pods[j]) })

	schedOpts := []scheduler.Options{
		scheduler.DisableReservedCapacityFallback,
		scheduler.NumConcurrentReconciles(int(math.Ceil(float64(opts.CPURequests) / 1000.0))),
		scheduler.MinValuesPolicy(opts.MinValuesPolicy),
	}
	if opts.PreferencePolicy == options.PreferencePolicyIgnore {
		schedOpts = append(schedOpts, scheduler.IgnorePreferences)
	}
	if len(pods) == 0 {
		finishOutcome(&out)
		return out, 0, nil
	}
	s, err := b.provisioner.NewScheduler(ctx, pods, nodes.Active(), sets.New[types.UID](), schedOpts...)
	if err != nil {
		if errors.Is(err, provisioning.ErrNodePoolsNotFound) {
			for _, p := range pods {
				out.Pending = append(out.Pending, PendingOut{Pod: podKey(p), Error: "no dynamic nodepools found"})
			}
			finishOutcome(&out)
			return out, 0, nil
		}
		return Outcome{}, 0, fmt.Errorf("NewScheduler: %w", err)
	}

	solveCtx := ctx
	if cfg.SolveTimeout > 0 {
		var cancel context.CancelFunc
		solveCtx, cancel = context.WithTimeout(ctx, cfg.SolveTimeout)
		defer cancel()
	}
	start := time.Now()
	results, err := s.Solve(solveCtx, pods)
	elapsed := time.Since(start)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return Outcome{}, elapsed, fmt.Errorf("Solve: %w", err)
		}
		out.TimedOut = true
	}
	results = results.TruncateInstanceTypes(ctx, scheduler.MaxInstanceTypes)

	nodeClassKey := karpv1.NodeClassLabelKey(nodeClassGK)
	dropKeys := sets.New(karpv1.NodeRegisteredLabelKey, karpv1.NodeInitializedLabelKey, nodeClassKey)
	for _, nc := range results.NewNodeClaims {
		out.NodeClaims = append(out.NodeClaims, nodeClaimOut(nc, dropKeys))
	}
	for _, en := range results.ExistingNodes {
		out.ExistingNodes = append(out.ExistingNodes, ExistingNodeOut{Name: en.Name(), Pods: podNames(en.Pods)})
	}
	for p, perr := range results.PodErrors {
		out.Pending = append(out.Pending, PendingOut{Pod: podKey(p), Error: normalizeError(perr.Error())})
	}
	finishOutcome(&out)
	return out, elapsed, nil
}

func podNames(pods []*corev1.Pod) []string {
	names := lo.Map(pods, func(p *corev1.Pod, _ int) string { return podKey(p) })
	sort.Strings(names)
	if names == nil {
		names = []string{}
	}
	return names
}

type pricedOffering struct {
	it    *cloudprovider.InstanceType
	price float64
	ct    string
	zone  string
}

// cheapestOffering prices a type as OrderByPrice does: launchable offerings
// only (a full reservation is available but not launchable).
func cheapestOffering(it *cloudprovider.InstanceType, reqs scheduling.Requirements) (pricedOffering, bool) {
	ofs := it.Offerings.Launchable().Compatible(reqs)
	if len(ofs) == 0 {
		return pricedOffering{it: it, price: math.MaxFloat64}, false
	}
	best := pricedOffering{it: it, price: math.MaxFloat64}
	for _, o := range ofs {
		c := pricedOffering{it: it, price: o.Price, ct: o.CapacityType(), zone: o.Zone()}
		if c.price < best.price ||
			(c.price == best.price && (c.ct < best.ct || (c.ct == best.ct && c.zone < best.zone))) {
			best = c
		}
	}
	return best, true
}

func nodeClaimOut(nc *scheduler.NodeClaim, dropKeys sets.Set[string]) NodeClaimOut {
	priced := lo.Map(nc.InstanceTypeOptions, func(it *cloudprovider.InstanceType, _ int) pricedOffering {
		p, _ := cheapestOffering(it, nc.Requirements)
		return p
	})
	sort.SliceStable(priced, func(i, j int) bool {
		if priced[i].price != priced[j].price {
			return priced[i].price < priced[j].price
		}
		return priced[i].it.Name < priced[j].it.Name
	})
	o := NodeClaimOut{
		NodePool:            nc.NodePoolName,
		InstanceTypeOptions: lo.Map(priced, func(p pricedOffering, _ int) string { return p.it.Name }),
		Requests:            resourceListStrings(nc.Spec.Resources.Requests),
		Requirements:        map[string]RequirementOut{},
		Pods:                podNames(nc.Pods),
	}
	if len(priced) > 0 && priced[0].price != math.MaxFloat64 {
		o.CheapestInstanceType = priced[0].it.Name
		o.CapacityType = priced[0].ct
		o.Zone = priced[0].zone
		o.Price = priced[0].price
	}
	for _, r := range nc.Requirements.NodeSelectorRequirements() {
		if dropKeys.Has(r.Key) {
			continue
		}
		ro := RequirementOut{Operator: string(r.Operator), Values: r.Values, MinValues: r.MinValues}
		if prev, ok := o.Requirements[r.Key]; ok {
			// a key with both bounds comes back as Gte and Lte entries
			if r.Operator == karpv1.NodeSelectorOpLte {
				prev.Lte = r.Values
				o.Requirements[r.Key] = prev
				continue
			}
			ro.Lte = prev.Values
		}
		o.Requirements[r.Key] = ro
	}
	return o
}

func finishOutcome(out *Outcome) {
	sort.SliceStable(out.NodeClaims, func(i, j int) bool {
		a, b := out.NodeClaims[i], out.NodeClaims[j]
		if len(a.Pods) > 0 && len(b.Pods) > 0 && a.Pods[0] != b.Pods[0] {
			return a.Pods[0] < b.Pods[0]
		}
		return a.NodePool < b.NodePool
	})
	sort.SliceStable(out.ExistingNodes, func(i, j int) bool { return out.ExistingNodes[i].Name < out.ExistingNodes[j].Name })
	sort.SliceStable(out.Pending, func(i, j int) bool { return out.Pending[i].Pod < out.Pending[j].Pod })
}

// defaultMaxVariants caps the alternative outcomes kept in a result (to keep
// the committed expected/ small); --max-variants changes it.
const defaultMaxVariants = 3

// runScenario solves a scenario `runs` times from scratch and reports
// whether the runs agreed; if they did not, it solves it up to
// cfg.ExtraRuns more times (Runs reports the total).
func runScenario(sc *Scenario, cfg RunConfig, runs int) (*Result, error) {
	if runs < 1 {
		runs = 1
	}
	res := &Result{Scenario: sc.Name, Runs: runs, Deterministic: true}
	seen := map[string]bool{}
	extended := false
	for i := 0; i < runs; i++ {
		out, d, err := solveOnce(sc, cfg)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		key := string(canonicalJSON(out))
		if i == 0 {
			res.Outcome = out
			res.DurationSeconds = d.Seconds()
			seen[key] = true
			continue
		}
		if !seen[key] {
			seen[key] = true
			res.Deterministic = false
			if len(res.Variants) < cfg.MaxVariants {
				res.Variants = append(res.Variants, out)
			}
		}
		if !extended && i == runs-1 && !res.Deterministic && cfg.ExtraRuns > 0 {
			extended = true
			runs += cfg.ExtraRuns
			res.Runs = runs
		}
	}
	return res, nil
}
