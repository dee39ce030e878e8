#!/usr/bin/env bash
# Builds kubeconform (the Go module github.com/yannh/kubeconform) into a cache outside the
# repository when it is missing, and generates JSON schemas for the Karpenter and Kubean CRDs
# from their openAPIV3Schema (kubeconform cannot download schemas here: no network but the
# module proxies). Prints two lines on stdout:
#   1. the path of the kubeconform binary
#   2. the -schema-location template for the generated schemas
# Everything else goes to stderr. Used by `cargo bench -p kk-lint --bench corpus`.
#
# Environment: KUBECONFORM_VERSION (default v0.8.0), KK_TESTBED_CACHE (default
# ~/.cache/kubean-karpenter/testbed), KK_SHARED_DIR (default ../shared beside the workspace).
set -euo pipefail

version="${KUBECONFORM_VERSION:-v0.8.0}"
cache="${KK_TESTBED_CACHE:-$HOME/.cache/kubean-karpenter/testbed}/kubeconform"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
shared="${KK_SHARED_DIR:-$root/../shared}"
build="$cache/$version"
bin="$build/kubeconform"
schemas="$cache/schemas"

command -v go >/dev/null || { echo "kubeconform.sh: go is not installed" >&2; exit 3; }

if [ ! -x "$bin" ] || [ ! -x "$build/crdschemas" ]; then
  mkdir -p "$build/src/crdschemas"
  cd "$build/src"
  [ -f go.mod ] || go mod init kk-kubeconform-build >&2
  # The CRD → JSON schema converter: openAPIV3Schema of each served version, as is, at
  # <group>/<kind>_<version>.json (kubeconform's {{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}).
  cat >crdschemas/main.go <<'GO'
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

type crd struct {
	Kind string `json:"kind"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: crdschemas OUTDIR CRD.yaml...")
		os.Exit(2)
	}
	out := os.Args[1]
	written := 0
	for _, file := range os.Args[2:] {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			var c crd
			if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
				os.Exit(1)
			}
			if c.Kind != "CustomResourceDefinition" {
				continue
			}
			for _, v := range c.Spec.Versions {
				if len(v.Schema.OpenAPIV3Schema) == 0 {
					continue
				}
				dir := filepath.Join(out, c.Spec.Group)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				name := filepath.Join(dir, strings.ToLower(c.Spec.Names.Kind)+"_"+v.Name+".json")
				if err := os.WriteFile(name, v.Schema.OpenAPIV3Schema, 0o644); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				written++
			}
		}
	}
	fmt.Fprintf(os.Stderr, "crdschemas: %d schemas in %s\n", written, out)
}
GO
  echo "kubeconform.sh: building kubeconform $version in $build (Go module proxy: ${GOPROXY:-$(go env GOPROXY)})" >&2
  go get "github.com/yannh/kubeconform/cmd/kubeconform@$version" sigs.k8s.io/yaml >&2
  go build -o "$bin" github.com/yannh/kubeconform/cmd/kubeconform >&2
  go build -o "$build/crdschemas" ./crdschemas >&2
fi

crds=()
for dir in "$root/crates/crd-check/crds/karpenter" "$shared/crds/kubean"; do
  [ -d "$dir" ] || { echo "kubeconform.sh: no CRDs at $dir (set KK_SHARED_DIR)" >&2; exit 3; }
  crds+=("$dir"/*.yaml)
done
rm -rf "$schemas"
mkdir -p "$schemas"
"$build/crdschemas" "$schemas" "${crds[@]}"

echo "$bin"
echo "$schemas/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json"
