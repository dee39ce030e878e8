//go:build tools

// Package tools records the programs this module builds that live in other
// modules, so that `go mod tidy` keeps their dependencies in go.mod/go.sum.
// The build tag keeps it out of every real build.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
