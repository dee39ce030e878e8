package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Result is what the oracle prints for one scenario.
type Result struct {
	Scenario string `json:"scenario"`
	Outcome
	// DurationSeconds is the wall time of Scheduler.Solve in the first run
	// (0 with --stable, so that committed results do not churn).
	DurationSeconds float64 `json:"durationSeconds"`
	// Runs is how often the scenario was solved (each time from scratch).
	Runs int `json:"runs"`
	// Deterministic is true when every run produced the same Outcome.
	Deterministic bool `json:"deterministic"`
	// Variants holds the other distinct outcomes seen (only when
	// Deterministic is false); the top-level outcome is the first run's.
	Variants []Outcome `json:"variants,omitempty"`
}

// Outcome is the scheduling decision, canonicalized: node claims sorted by
// their first pod, pods sorted, instance types sorted by price then name.
type Outcome struct {
	NodeClaims    []NodeClaimOut    `json:"nodeClaims"`
	ExistingNodes []ExistingNodeOut `json:"existingNodes"`
	Pending       []PendingOut      `json:"pending"`
	// TimedOut is true when Solve hit its deadline (production: 1 minute).
	TimedOut bool `json:"timedOut,omitempty"`
}

type NodeClaimOut struct {
	NodePool string `json:"nodePool"`
	// InstanceTypeOptions after Karpenter's TruncateInstanceTypes, sorted by
	// the price of the cheapest available offering compatible with the node
	// claim's requirements, then by name.
	InstanceTypeOptions  []string `json:"instanceTypeOptions"`
	CheapestInstanceType string   `json:"cheapestInstanceType"`
	// CapacityType, Zone and Price of the cheapest compatible available
	// offering of CheapestInstanceType (ties: capacity type, then zone, by name).
	CapacityType string  `json:"capacityType"`
	Zone         string  `json:"zone"`
	Price        float64 `json:"price"`
	// Requests is spec.resources.requests of the node claim: the pods'
	// requests plus the smallest daemonset overhead among remaining options.
	Requests map[string]string `json:"requests,omitempty"`
	// Requirements are the scheduler's node claim requirements after
	// FinalizeScheduling, without the simulation-only keys
	// (karpenter.sh/registered, karpenter.sh/initialized) and the NodeClass
	// label key (cloud provider specific).
	Requirements map[string]RequirementOut `json:"requirements"`
	Pods         []string                  `json:"pods"`
}

type RequirementOut struct {
	Operator  string   `json:"operator"`
	Values    []string `json:"values,omitempty"`
	MinValues *int     `json:"minValues,omitempty"`
	// Lte is set only when a key has both a lower (operator Gte) and an
	// upper bound.
	Lte []string `json:"lte,omitempty"`
}

type ExistingNodeOut struct {
	Name string `json:"name"`
	// Pods are the pending pods the scheduler put on this node.
	Pods []string `json:"pods"`
}

type PendingOut struct {
	Pod   string `json:"pod"`
	Error string `json:"error"`
}

var placeholderRE = regexp.MustCompile(`hostname-placeholder-\d+`)

// normalizeError removes process-global counters from Karpenter's error
// text: new node claims get hostnames "hostname-placeholder-%04d" from a
// package-level atomic counter that keeps counting across scenarios.
func normalizeError(s string) string {
	return placeholderRE.ReplaceAllString(s, "hostname-placeholder-*")
}

func canonicalJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func prettyJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func jsonUnmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// resultFileJSON writes a result compactly but diffably (as the scenario
// files): one top-level field, one node claim / node / pending pod, and one
// variant, per line.
func resultFileJSON(res *Result) []byte {
	var buf bytes.Buffer
	m := func(v any) string { return strings.TrimSuffix(string(canonicalJSON(v)), "\n") }
	arr := func(name string, n int, el func(i int) any) {
		fmt.Fprintf(&buf, ",\n%s:[", m(name))
		for i := 0; i < n; i++ {
			if i > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n ")
			buf.WriteString(m(el(i)))
		}
		if n > 0 {
			buf.WriteString("\n")
		}
		buf.WriteString("]")
	}
	fmt.Fprintf(&buf, "{\n%s:%s", m("scenario"), m(res.Scenario))
	fmt.Fprintf(&buf, ",\n%s:%s", m("deterministic"), m(res.Deterministic))
	fmt.Fprintf(&buf, ",\n%s:%s", m("runs"), m(res.Runs))
	fmt.Fprintf(&buf, ",\n%s:%s", m("durationSeconds"), m(res.DurationSeconds))
	if res.TimedOut {
		fmt.Fprintf(&buf, ",\n%s:true", m("timedOut"))
	}
	arr("nodeClaims", len(res.NodeClaims), func(i int) any { return res.NodeClaims[i] })
	arr("existingNodes", len(res.ExistingNodes), func(i int) any { return res.ExistingNodes[i] })
	arr("pending", len(res.Pending), func(i int) any { return res.Pending[i] })
	if len(res.Variants) > 0 {
		arr("variants", len(res.Variants), func(i int) any { return res.Variants[i] })
	}
	buf.WriteString("\n}\n")
	return buf.Bytes()
}

// shape is the coarse summary verify falls back on for nondeterministic
// scenarios: which pods stay pending, how many node claims each NodePool
// gets, and how many pods each existing node takes.
func (o Outcome) shape() string {
	pools := map[string]int{}
	for _, nc := range o.NodeClaims {
		pools[nc.NodePool]++
	}
	nodes := map[string]int{}
	for _, en := range o.ExistingNodes {
		nodes[en.Name] = len(en.Pods)
	}
	var pending []string
	for _, p := range o.Pending {
		pending = append(pending, p.Pod)
	}
	return string(canonicalJSON(map[string]any{"pending": pending, "pools": pools, "nodes": nodes, "timedOut": o.TimedOut}))
}
