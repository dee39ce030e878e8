#!/usr/bin/env bash
# Adds the repository's real inputs to fuzz/corpus/<target>/ (docs/internals/fuzzing.md); run
# from anywhere, then `cargo +nightly fuzz cmin <target>` to drop what adds no coverage.
# store_lines and kubeconfig have hand-written seeds only (already in their corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
c=fuzz/corpus
mkdir -p $c/{spec,manifests,plan_scenario,disruption_state,store_lines,kubeconfig}
add() { cp "$2" "$c/$1/seed-$(echo "$2" | tr '/' '_' | sed 's/^\.*_*//')"; }
add spec crates/spec/src/example.yaml
for f in fixtures/specs/*.yaml fixtures/specs/invalid/*.yaml; do add spec "$f"; done
for f in fixtures/lint/*/*.yaml; do add manifests "$f"; done
if [ -d ../shared/examples/kubean ]; then
  for f in ../shared/examples/kubean/*.yml; do add manifests "$f"; done
fi
for f in testbed/karpenter-oracle/cases/*.json fixtures/sim/*; do add plan_scenario "$f"; done
# The six smallest oracle scenarios (the generated ones are large).
for f in $(ls -S testbed/karpenter-oracle/scenarios/*.json | tail -6); do add plan_scenario "$f"; done
for f in $(find fixtures/disrupt fixtures/top -name '*.yaml'); do add disruption_state "$f"; done
for f in $(ls -S testbed/karpenter-oracle/disrupt/scenarios/*.json | tail -8); do add disruption_state "$f"; done
add kubeconfig fixtures/specs/pki/kubeconfig
