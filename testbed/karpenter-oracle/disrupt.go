package main

// The disruption oracle: one pass of Karpenter's disruption controller
// (sigs.k8s.io/karpenter v1.15.0 pkg/controllers/disruption, Controller.disrupt
// for each method in NewMethods' order) on a scenario's cluster state, with the
// same fake cloud provider, fake client and cluster state as the provisioning
// oracle, and a fake clock at the scenario's "now". See docs/internals/fidelity.md
// "The disruption oracle".
//
// What is not Karpenter's code here:
//   - the NodeClaims' Consolidatable condition is set as the nodeclaim
//     disruption controller sets it (consolidateAfter set, Initialized, and
//     not disruptionutils.IsUnderConsolidateAfter at "now"); Drifted is read
//     from the scenario as given;
//   - the command validators are replaced by one that accepts the command at
//     once: upstream waits 15 s and re-checks that nothing changed, and in a
//     frozen state nothing does;
//   - the pass stops at the first command, as Controller.Reconcile does; the
//     command is not executed (no queue, no replacement launched).
//
// Multi-node consolidation keeps its 1-minute timeout (a constant upstream):
// the result records the method's wall time and whether it reached the limit.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/samber/lo"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/disruption"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/state/cost"
	disruptionutils "sigs.k8s.io/karpenter/pkg/utils/disruption"
)

// DisruptOutcome is one pass, canonicalized.
type DisruptOutcome struct {
	// Candidates: for each method evaluated (in order, up to the one that
	// produced a command), the sorted names of the nodes that passed
	// GetCandidates and the method's ShouldDisrupt.
	Candidates []MethodCandidates `json:"candidates"`
	// Command is the first command of the pass, or null.
	Command *CommandOut `json:"command"`
	// MultiNodeTimedOut: multi-node consolidation ran into its 1-minute limit.
	MultiNodeTimedOut bool `json:"multiNodeTimedOut,omitempty"`
}

type MethodCandidates struct {
	Method string   `json:"method"`
	Nodes  []string `json:"nodes"`
}

type CommandOut struct {
	Method   string   `json:"method"`
	Decision string   `json:"decision"`
	Nodes    []string `json:"nodes"`
	// Replacements: node pool and the instance type options (sorted by name)
	// after the consolidation price filters.
	Replacements []ReplacementOut `json:"replacements"`
}

type ReplacementOut struct {
	NodePool            string   `json:"nodePool"`
	InstanceTypeOptions []string `json:"instanceTypeOptions"`
}

// DisruptResult is what the oracle writes for a disruption scenario.
type DisruptResult struct {
	Scenario string `json:"scenario"`
	DisruptOutcome
	// MultiNodeSeconds is the wall time of multi-node consolidation's
	// ComputeCommands in the first run (0 with --stable).
	MultiNodeSeconds float64          `json:"multiNodeSeconds"`
	Runs             int              `json:"runs"`
	Deterministic    bool             `json:"deterministic"`
	Variants         []DisruptOutcome `json:"variants,omitempty"`
}

type acceptAll struct{}

func (acceptAll) Validate(_ context.Context, cmd disruption.Command, _ time.Duration) (disruption.Command, error) {
	return cmd, nil
}

func methodName(m disruption.Method) string {
	switch m.(type) {
	case *disruption.Emptiness:
		return "Emptiness"
	case *disruption.StaticDrift:
		return "StaticDrift"
	case *disruption.Drift:
		return "Drift"
	case *disruption.MultiNodeConsolidation:
		return "MultiNodeConsolidation"
	case *disruption.SingleNodeConsolidation:
		return "SingleNodeConsolidation"
	}
	return fmt.Sprintf("%T", m)
}

func disruptOnce(sc *Scenario, cfg RunConfig) (DisruptOutcome, time.Duration, error) {
	if sc.Disruption == nil {
		return DisruptOutcome{}, 0, fmt.Errorf("scenario %s has no \"disruption\" section", sc.Name)
	}
	var clk clock.Clock = clocktesting.NewFakeClock(sc.Disruption.Now.Time)
	if cfg.Clock != nil {
		clk = cfg.Clock // disrupt-bench: a clock that moves
	}
	cfg.Clock = clk
	// Consolidatable, as the nodeclaim disruption controller sets it.
	sc2 := *sc
	sc2.ExistingNodes = make([]ExistingNodeSpec, len(sc.ExistingNodes))
	pools := map[string]*karpv1.NodePool{}
	for i := range sc.NodePools {
		pools[sc.NodePools[i].Name] = &sc.NodePools[i]
	}
	for i, en := range sc.ExistingNodes {
		sc2.ExistingNodes[i] = en
		if en.NodeClaim == nil {
			continue
		}
		nc := en.NodeClaim.DeepCopy()
		np := pools[nc.Labels[karpv1.NodePoolLabelKey]]
		if np != nil && np.Spec.Disruption.ConsolidateAfter.Duration != nil &&
			nc.StatusConditions().Get(karpv1.ConditionTypeInitialized).IsTrue() &&
			!disruptionutils.IsUnderConsolidateAfter(np, nc, clk) {
			nc.StatusConditions().SetTrue(karpv1.ConditionTypeConsolidatable)
		}
		sc2.ExistingNodes[i].NodeClaim = nc
	}
	b, err := build(&sc2, cfg)
	if err != nil {
		return DisruptOutcome{}, 0, err
	}
	ctx := b.ctx
	options.FromContext(ctx).FeatureGates.SpotToSpotConsolidation = sc.Disruption.SpotToSpot

	// The cluster cost tracker, fed as its informers would.
	clusterCost := cost.NewClusterCost(ctx, b.cloudProvider, b.kubeClient)
	for _, np := range b.pools {
		its, err := b.cloudProvider.GetInstanceTypes(ctx, np)
		if err != nil {
			return DisruptOutcome{}, 0, err
		}
		clusterCost.UpdateOfferings(ctx, np, its)
	}
	for _, nc := range b.nodeClaims {
		if err := clusterCost.UpdateNodeClaim(ctx, nc); err != nil {
			return DisruptOutcome{}, 0, fmt.Errorf("cost.UpdateNodeClaim(%s): %w", nc.Name, err)
		}
	}

	recorder := events.NewRecorder(&record.FakeRecorder{})
	queue := disruption.NewQueue(b.kubeClient, recorder, b.cluster, clk, b.provisioner)
	c := disruption.MakeConsolidation(clk, b.cluster, b.kubeClient, b.provisioner, b.cloudProvider, recorder, queue)
	v := disruption.WithValidator(acceptAll{})
	methods := []disruption.Method{
		disruption.NewEmptiness(c, v),
		disruption.NewStaticDrift(b.cluster, b.provisioner, b.cloudProvider, recorder),
		disruption.NewDrift(b.kubeClient, b.cluster, b.provisioner, recorder, clk),
		disruption.NewMultiNodeConsolidation(c, v),
		disruption.NewSingleNodeConsolidation(c, v),
	}
	out := DisruptOutcome{Candidates: []MethodCandidates{}}
	var multi time.Duration
	for _, m := range methods {
		cands, totals, err := disruption.GetCandidatesWithTotals(ctx, b.cluster, b.kubeClient, recorder, clk, b.cloudProvider,
			m.ShouldDisrupt, m.Class(), queue, clusterCost)
		if err != nil {
			return DisruptOutcome{}, 0, fmt.Errorf("%s: candidates: %w", methodName(m), err)
		}
		names := lo.Map(cands, func(c *disruption.Candidate, _ int) string { return c.Name() })
		sort.Strings(names)
		if names == nil {
			names = []string{}
		}
		out.Candidates = append(out.Candidates, MethodCandidates{Method: methodName(m), Nodes: names})
		if len(cands) == 0 {
			continue
		}
		if setter, ok := m.(disruption.NodePoolTotalsSetter); ok {
			setter.SetNodePoolTotals(totals)
		}
		budgets, err := disruption.BuildDisruptionBudgetMapping(ctx, b.cluster, clk, b.kubeClient, b.cloudProvider, recorder, m.Reason())
		if err != nil {
			return DisruptOutcome{}, 0, fmt.Errorf("%s: budgets: %w", methodName(m), err)
		}
		start := time.Now()
		cmds, err := m.ComputeCommands(ctx, budgets, cands...)
		if _, ok := m.(*disruption.MultiNodeConsolidation); ok {
			multi = time.Since(start)
			out.MultiNodeTimedOut = multi >= disruption.MultiNodeConsolidationTimeoutDuration
		}
		if err != nil {
			return DisruptOutcome{}, 0, fmt.Errorf("%s: %w", methodName(m), err)
		}
		cmds = lo.Filter(cmds, func(c disruption.Command, _ int) bool { return c.Decision() != disruption.NoOpDecision })
		if len(cmds) == 0 {
			continue
		}
		cmd := cmds[0]
		co := &CommandOut{
			Method:       methodName(m),
			Decision:     string(cmd.Decision()),
			Nodes:        lo.Map(cmd.Candidates, func(c *disruption.Candidate, _ int) string { return c.Name() }),
			Replacements: []ReplacementOut{},
		}
		sort.Strings(co.Nodes)
		for _, r := range cmd.Replacements {
			opts := lo.Map(r.InstanceTypeOptions, func(it *cloudprovider.InstanceType, _ int) string { return it.Name })
			sort.Strings(opts)
			co.Replacements = append(co.Replacements, ReplacementOut{NodePool: r.NodePoolName, InstanceTypeOptions: opts})
		}
		sort.SliceStable(co.Replacements, func(i, j int) bool { return co.Replacements[i].NodePool < co.Replacements[j].NodePool })
		out.Command = co
		break
	}
	return out, multi, nil
}

// runDisruptScenario runs `runs` disruption passes on a scenario, each from
// scratch, keeping up to cfg.MaxVariants outcomes other than the first; if
// the passes disagree it runs cfg.ExtraRuns more (Runs reports the total).
func runDisruptScenario(sc *Scenario, cfg RunConfig, runs int) (*DisruptResult, error) {
	if runs < 1 {
		runs = 1
	}
	res := &DisruptResult{Scenario: sc.Name, Runs: runs, Deterministic: true}
	seen := map[string]bool{}
	extended := false
	for i := 0; i < runs; i++ {
		out, d, err := disruptOnce(sc, cfg)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		key := string(canonicalJSON(out))
		if i == 0 {
			res.DisruptOutcome = out
			res.MultiNodeSeconds = d.Seconds()
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
		// Passes that disagreed: cfg.ExtraRuns more, once, so that a rare branch of a
		// map-order tie is recorded too (as runScenario does for provisioning).
		if !extended && i == runs-1 && !res.Deterministic && cfg.ExtraRuns > 0 {
			extended = true
			runs += cfg.ExtraRuns
			res.Runs = runs
		}
	}
	return res, nil
}
