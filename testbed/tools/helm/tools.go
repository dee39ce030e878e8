//go:build tools

// Package tools names the one program this module builds, so that `go mod tidy` keeps its
// dependencies in go.mod and go.sum. The build tag keeps it out of every real build.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
