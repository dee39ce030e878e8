// Command karpenter-oracle runs Karpenter's provisioning scheduler
// (sigs.k8s.io/karpenter v1.15.0) in-process on scenario files, so that the
// Rust re-implementation in crates/sim can be compared against it.
// Test tooling only; see README.md and docs/internals/fidelity.md.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const usage = `usage:
  karpenter-oracle run [flags] SCENARIO.json          print the result of one scenario
  karpenter-oracle run-dir [flags] DIR OUTDIR         solve every DIR/*.json into OUTDIR/<same name>
  karpenter-oracle verify [flags] DIR EXPECTED_DIR    re-solve DIR/*.json and compare with EXPECTED_DIR
  karpenter-oracle generate --seed S --count N --out DIR
  karpenter-oracle bench [--sizes 100,1000,5000,20000] [--emit DIR]
  karpenter-oracle disrupt-generate --seed S --count N [--nodes K] --out DIR
  karpenter-oracle disrupt-run-dir [flags] DIR OUTDIR  one disruption pass per DIR/*.json (disrupt.go)
  karpenter-oracle disrupt-verify [flags] DIR EXPECTED_DIR  re-run and compare (an outcome must be a recorded one)
  karpenter-oracle disrupt-bench --nodes N [--pods-per-node P] [--emit FILE]

flags of run, run-dir, verify:
  --runs N            solve each scenario N times from scratch (default 2)
  --cpu-requests M    controller CPU requests in millicores (default 1000: one worker)
  --solve-timeout D   deadline for Solve (default 1m, as Provisioner.Schedule; 0 = none)
  --stable            write durationSeconds as 0 (run, run-dir)
  --extra-runs N      when the first --runs solves disagree, solve up to N more times (default 0)
  --max-variants N    keep up to N other outcomes per scenario (default 3)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(os.Args[2:])
	case "run-dir":
		err = cmdRunDir(os.Args[2:])
	case "verify":
		err = cmdVerify(os.Args[2:])
	case "generate":
		err = cmdGenerate(os.Args[2:])
	case "bench":
		err = cmdBench(os.Args[2:])
	case "disrupt-generate":
		err = cmdGenerateDisrupt(os.Args[2:])
	case "disrupt-run-dir":
		err = cmdDisruptRunDir(os.Args[2:])
	case "disrupt-verify":
		err = cmdDisruptVerify(os.Args[2:])
	case "disrupt-bench":
		err = cmdDisruptBench(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		var ec exitCode
		if asExit(err, &ec) {
			os.Exit(int(ec)) // already reported
		}
		fmt.Fprintf(os.Stderr, "karpenter-oracle: %v\n", err)
		os.Exit(1)
	}
}

type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

func asExit(err error, ec *exitCode) bool {
	if e, ok := err.(exitCode); ok {
		*ec = e
		return true
	}
	return false
}

type runFlags struct {
	runs     int
	extra    int
	variants int
	cfg      RunConfig
	stable   bool
	fs       *flag.FlagSet
	timeout  time.Duration
	cpu      int64
}

func newRunFlags(name string) *runFlags {
	rf := &runFlags{fs: flag.NewFlagSet(name, flag.ExitOnError)}
	rf.fs.IntVar(&rf.runs, "runs", 2, "solve each scenario this many times")
	rf.fs.Int64Var(&rf.cpu, "cpu-requests", defaultRunConfig.CPURequests, "controller CPU requests (millicores)")
	rf.fs.DurationVar(&rf.timeout, "solve-timeout", defaultRunConfig.SolveTimeout, "Solve deadline (0 = none)")
	rf.fs.BoolVar(&rf.stable, "stable", false, "write durationSeconds as 0")
	rf.fs.IntVar(&rf.extra, "extra-runs", 0, "when the first solves disagree, solve up to this many more times")
	rf.fs.IntVar(&rf.variants, "max-variants", defaultMaxVariants, "other outcomes kept per scenario")
	return rf
}

func (rf *runFlags) parse(args []string) []string {
	rest := parseInterleaved(rf.fs, args)
	rf.cfg = RunConfig{CPURequests: rf.cpu, SolveTimeout: rf.timeout, ExtraRuns: rf.extra, MaxVariants: rf.variants}
	return rest
}

// parseInterleaved parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) []string {
	var rest []string
	for {
		_ = fs.Parse(args)
		args = fs.Args()
		if len(args) == 0 {
			return rest
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

func cmdRun(args []string) error {
	rf := newRunFlags("run")
	rest := rf.parse(args)
	if len(rest) != 1 {
		return fmt.Errorf("run needs one scenario file")
	}
	sc, err := readScenario(rest[0])
	if err != nil {
		return err
	}
	res, err := runScenario(sc, rf.cfg, rf.runs)
	if err != nil {
		return err
	}
	if rf.stable {
		res.DurationSeconds = 0
	}
	_, err = os.Stdout.Write(prettyJSON(res))
	return err
}

func scenarioFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.json in %s", dir)
	}
	return files, nil
}

func cmdRunDir(args []string) error {
	rf := newRunFlags("run-dir")
	rest := rf.parse(args)
	if len(rest) != 2 {
		return fmt.Errorf("run-dir needs DIR OUTDIR")
	}
	files, err := scenarioFiles(rest[0])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(rest[1], 0o755); err != nil {
		return err
	}
	start := time.Now()
	nondet := 0
	for _, f := range files {
		sc, err := readScenario(f)
		if err != nil {
			return err
		}
		res, err := runScenario(sc, rf.cfg, rf.runs)
		if err != nil {
			return err
		}
		if !res.Deterministic {
			nondet++
		}
		if rf.stable {
			res.DurationSeconds = 0
		}
		if err := os.WriteFile(filepath.Join(rest[1], filepath.Base(f)), resultFileJSON(res), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "karpenter-oracle: %d scenarios (%d runs each) in %.1fs, %d nondeterministic\n",
		len(files), rf.runs, time.Since(start).Seconds(), nondet)
	return nil
}

// cmdVerify re-solves every scenario and compares with the committed
// results (exit 1 on any difference). Karpenter's scheduler is not
// deterministic (docs/internals/fidelity.md), so a scenario passes when
//   - a fresh solve reproduces the recorded outcome or one of its recorded
//     variants exactly, trying up to --runs + --retries solves; or, failing that,
//   - it is not deterministic (recorded or now) and a fresh outcome has the
//     same shape as a recorded one: same pending pods, same number of node
//     claims per NodePool, same number of pods per existing node.
//
// A scenario recorded deterministic whose fresh solves all agree on another
// outcome fails.
func cmdVerify(args []string) error {
	rf := newRunFlags("verify")
	retries := rf.fs.Int("retries", 20, "extra solves to look for a recorded outcome")
	rest := rf.parse(args)
	if len(rest) != 2 {
		return fmt.Errorf("verify needs DIR EXPECTED_DIR")
	}
	files, err := scenarioFiles(rest[0])
	if err != nil {
		return err
	}
	var problems []string
	expectedNames := map[string]bool{}
	start := time.Now()
	exact, shaped := 0, 0
	for _, f := range files {
		base := filepath.Base(f)
		expectedNames[base] = true
		expData, err := os.ReadFile(filepath.Join(rest[1], base))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: no expected result (%v)", base, err))
			continue
		}
		var exp Result
		if err := jsonUnmarshalStrict(expData, &exp); err != nil {
			problems = append(problems, fmt.Sprintf("%s: bad expected result: %v", base, err))
			continue
		}
		sc, err := readScenario(f)
		if err != nil {
			return err
		}
		if exp.Scenario != sc.Name {
			problems = append(problems, fmt.Sprintf("%s: expected result is for scenario %q, not %q", base, exp.Scenario, sc.Name))
			continue
		}
		recorded := append([]Outcome{exp.Outcome}, exp.Variants...)
		want := map[string]bool{}
		wantShape := map[string]bool{}
		for _, o := range recorded {
			want[string(canonicalJSON(o))] = true
			wantShape[o.shape()] = true
		}
		res, err := runScenario(sc, rf.cfg, rf.runs)
		if err != nil {
			return err
		}
		fresh := append([]Outcome{res.Outcome}, res.Variants...)
		match := false
		for _, o := range fresh {
			match = match || want[string(canonicalJSON(o))]
		}
		for i := 0; !match && i < *retries; i++ {
			o, _, err := solveOnce(sc, rf.cfg)
			if err != nil {
				return err
			}
			fresh = append(fresh, o)
			match = want[string(canonicalJSON(o))]
		}
		if match {
			exact++
			continue
		}
		freshAgree := true
		for _, o := range fresh[1:] {
			freshAgree = freshAgree && bytes.Equal(canonicalJSON(o), canonicalJSON(fresh[0]))
		}
		if exp.Deterministic && freshAgree {
			problems = append(problems, fmt.Sprintf("%s: result differs from expected (deterministic, %d solves)", base, len(fresh)))
			continue
		}
		shapeMatch := false
		for _, o := range fresh {
			shapeMatch = shapeMatch || wantShape[o.shape()]
		}
		if shapeMatch {
			shaped++
			fmt.Fprintf(os.Stderr, "karpenter-oracle: note: %s: nondeterministic; matched the shape of a recorded outcome, not an outcome (%d solves)\n", base, len(fresh))
			continue
		}
		problems = append(problems, fmt.Sprintf("%s: nondeterministic; no fresh outcome (%d solves) matches a recorded outcome or its shape", base, len(fresh)))
	}
	if extra, _ := filepath.Glob(filepath.Join(rest[1], "*.json")); len(extra) > 0 {
		for _, e := range extra {
			if !expectedNames[filepath.Base(e)] {
				problems = append(problems, fmt.Sprintf("%s: expected result without scenario", filepath.Base(e)))
			}
		}
	}
	fmt.Fprintf(os.Stderr, "karpenter-oracle: verified %d scenarios in %.1fs: %d exact, %d by shape, %d problem(s)\n",
		len(files), time.Since(start).Seconds(), exact, shaped, len(problems))
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, strings.Join(problems, "\n"))
		return exitCode(1)
	}
	return nil
}

func cmdDisruptRunDir(args []string) error {
	rf := newRunFlags("disrupt-run-dir")
	rest := rf.parse(args)
	if len(rest) != 2 {
		return fmt.Errorf("disrupt-run-dir needs DIR OUTDIR")
	}
	files, err := scenarioFiles(rest[0])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(rest[1], 0o755); err != nil {
		return err
	}
	start := time.Now()
	nondet, commands := 0, 0
	for _, f := range files {
		sc, err := readScenario(f)
		if err != nil {
			return err
		}
		res, err := runDisruptScenario(sc, rf.cfg, rf.runs)
		if err != nil {
			return err
		}
		if !res.Deterministic {
			nondet++
		}
		if res.Command != nil {
			commands++
		}
		if rf.stable {
			res.MultiNodeSeconds = 0
		}
		if err := os.WriteFile(filepath.Join(rest[1], filepath.Base(f)), canonicalJSON(res), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "karpenter-oracle: %d disruption scenarios (%d runs each) in %.1fs, %d with a command, %d nondeterministic\n",
		len(files), rf.runs, time.Since(start).Seconds(), commands, nondet)
	return nil
}

// cmdDisruptVerify re-runs every disruption scenario and compares with the
// recorded results: it fails when a scenario's fresh outcomes include none
// of the recorded ones, and reports (without failing) a fresh outcome that
// is a new variant of a nondeterministic scenario.
func cmdDisruptVerify(args []string) error {
	rf := newRunFlags("disrupt-verify")
	rest := rf.parse(args)
	if len(rest) != 2 {
		return fmt.Errorf("disrupt-verify needs DIR EXPECTED_DIR")
	}
	files, err := scenarioFiles(rest[0])
	if err != nil {
		return err
	}
	var problems []string
	for _, f := range files {
		base := filepath.Base(f)
		data, err := os.ReadFile(filepath.Join(rest[1], base))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: no expected result (%v)", base, err))
			continue
		}
		var exp DisruptResult
		if err := jsonUnmarshalStrict(data, &exp); err != nil {
			problems = append(problems, fmt.Sprintf("%s: bad expected result: %v", base, err))
			continue
		}
		recorded := map[string]bool{string(canonicalJSON(exp.DisruptOutcome)): true}
		for _, v := range exp.Variants {
			recorded[string(canonicalJSON(v))] = true
		}
		sc, err := readScenario(f)
		if err != nil {
			return err
		}
		res, err := runDisruptScenario(sc, rf.cfg, rf.runs)
		if err != nil {
			return err
		}
		fresh := append([]DisruptOutcome{res.DisruptOutcome}, res.Variants...)
		hit := false
		for _, o := range fresh {
			if recorded[string(canonicalJSON(o))] {
				hit = true
			} else {
				fmt.Fprintf(os.Stderr, "karpenter-oracle: %s: an unrecorded outcome: %s", base, canonicalJSON(o))
			}
		}
		if !hit {
			problems = append(problems, base+": no fresh outcome is a recorded one")
		}
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "karpenter-oracle:", p)
	}
	if len(problems) > 0 {
		return exitCode(1)
	}
	fmt.Fprintf(os.Stderr, "karpenter-oracle: %d disruption scenarios agree with %s\n", len(files), rest[1])
	return nil
}
