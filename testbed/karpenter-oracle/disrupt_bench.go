package main

// disrupt-bench: one disruption pass of Karpenter's own methods on a large
// generated cluster state (N nodes, about P pods each), timed. The same state
// can be written out (--emit) for the Rust benchmark.

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func cmdDisruptBench(args []string) error {
	fs := flag.NewFlagSet("disrupt-bench", flag.ExitOnError)
	nodes := fs.Int("nodes", 1000, "nodes")
	emit := fs.String("emit", "", "write the scenario to this file")
	seed := fs.Int64("seed", 7, "seed")
	if rest := parseInterleaved(fs, args); len(rest) > 0 {
		return fmt.Errorf("disrupt-bench: unexpected arguments %v", rest)
	}
	keepNever = true
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
	out, multi, err := disruptOnce(sc, RunConfig{CPURequests: 1000})
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
