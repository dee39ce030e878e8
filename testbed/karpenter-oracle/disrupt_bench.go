package main

// disrupt-bench: one disruption pass of Karpenter's own methods on a large
// generated cluster state (N nodes, about P pods each), timed. The same state
// can be written out (--emit) for the Rust benchmark.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// movingClock is the scenario's "now" plus the real time elapsed since the
// pass started, so that single-node consolidation's 3-minute limit (on the
// controller's clock) applies in the benchmark as in production.
type movingClock struct {
	clock.RealClock
	base  time.Time
	start time.Time
}

func (c *movingClock) Now() time.Time                  { return c.base.Add(time.Since(c.start)) }
func (c *movingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// podIndexClient answers List(pods, MatchingFields{"spec.nodeName": X}) from
// a map built once, like the manager's cache index; everything else goes to
// the fake client. The state does not change during a pass.
type podIndexClient struct {
	client.Client
	byNode map[string][]*corev1.Pod
}

func newPodIndexClient(c client.Client, pods []*corev1.Pod) client.Client {
	idx := &podIndexClient{Client: c, byNode: map[string][]*corev1.Pod{}}
	for _, p := range pods {
		idx.byNode[p.Spec.NodeName] = append(idx.byNode[p.Spec.NodeName], p)
	}
	return idx
}

func (c *podIndexClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if pl, ok := list.(*corev1.PodList); ok {
		o := &client.ListOptions{}
		o.ApplyOptions(opts)
		if o.FieldSelector != nil {
			if node, found := o.FieldSelector.RequiresExactMatch("spec.nodeName"); found && o.LabelSelector == nil && o.Namespace == "" {
				pl.Items = make([]corev1.Pod, 0, len(c.byNode[node]))
				for _, p := range c.byNode[node] {
					pl.Items = append(pl.Items, *p.DeepCopy())
				}
				return nil
			}
		}
	}
	return c.Client.List(ctx, list, opts...)
}

func cmdDisruptBench(args []string) error {
	fs := flag.NewFlagSet("disrupt-bench", flag.ExitOnError)
	nodes := fs.Int("nodes", 1000, "nodes")
	emit := fs.String("emit", "", "write the scenario to this file")
	seed := fs.Int64("seed", 7, "seed")
	ppn := fs.Int("pods-per-node", 20, "pods per node")
	if rest := parseInterleaved(fs, args); len(rest) > 0 {
		return fmt.Errorf("disrupt-bench: unexpected arguments %v", rest)
	}
	keepNever = true
	podsPerNode = *ppn
	sc := generateDisruptScenario(*seed, 0, *nodes)
	sc.Name = fmt.Sprintf("disrupt-bench-%d", *nodes)
	if *emit != "" {
		if err := os.WriteFile(*emit, disruptScenarioJSON(sc), 0o644); err != nil {
			return err
		}
	}
	pods := 0
	for _, en := range sc.ExistingNodes {
		pods += len(en.Pods)
	}
	start := time.Now()
	out, multi, err := disruptOnce(sc, RunConfig{CPURequests: 1000, IndexPods: true,
		Clock: &movingClock{base: sc.Disruption.Now.Time, start: time.Now()}})
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	cmd := "none"
	if out.Command != nil {
		cmd = fmt.Sprintf("%s %s %d node(s)", out.Command.Method, out.Command.Decision, len(out.Command.Nodes))
	}
	fmt.Printf("{\"nodes\": %d, \"pods\": %d, \"seconds\": %.3f, \"multiNodeSeconds\": %.3f, \"multiNodeTimedOut\": %v, \"command\": %q}\n",
		len(sc.ExistingNodes), pods, elapsed.Seconds(), multi.Seconds(), out.MultiNodeTimedOut, cmd)
	return nil
}
