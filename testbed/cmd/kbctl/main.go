// Command kbctl is the testbed's tiny stand-in for `kubectl apply --server-side`:
// it applies YAML/JSON manifests (multi-document) through the dynamic client and
// waits for any CustomResourceDefinitions among them to be Established. It
// exists so that testbed/up does not need a kubectl binary on the machine.
//
//	kbctl [--kubeconfig FILE] apply [--timeout 120s] [--namespace NS] FILE...
//	kbctl [--kubeconfig FILE] version
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

const fieldManager = "kk-testbed"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func usage() {
	fmt.Fprintf(os.Stderr, "usage:\n  kbctl [--kubeconfig FILE] apply [--timeout 120s] [--namespace NS] FILE...\n  kbctl [--kubeconfig FILE] version\n")
	os.Exit(2)
}

func main() {
	global := flag.NewFlagSet("kbctl", flag.ExitOnError)
	kubeconfig := global.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	global.Usage = usage
	_ = global.Parse(os.Args[1:])
	if global.NArg() < 1 {
		usage()
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if *kubeconfig != "" {
		rules.ExplicitPath = *kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fail(fmt.Errorf("load kubeconfig: %w", err))
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "kbctl (kubean-karpenter testbed)"

	args := global.Args()
	switch args[0] {
	case "apply":
		fs := flag.NewFlagSet("apply", flag.ExitOnError)
		timeout := fs.Duration("timeout", 120*time.Second, "overall deadline, including waiting for CRDs to be Established")
		namespace := fs.String("namespace", "default", "namespace for namespaced objects that name none")
		_ = fs.Parse(args[1:])
		if fs.NArg() == 0 {
			usage()
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		if err := apply(ctx, cfg, *namespace, fs.Args()); err != nil {
			fail(err)
		}
	case "version":
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			fail(err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			fail(err)
		}
		fmt.Println(v.GitVersion)
	default:
		usage()
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "kbctl: %v\n", err)
	os.Exit(1)
}

// readObjects decodes every non-empty YAML or JSON document in the file.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: document without apiVersion/kind", path)
		}
		out = append(out, u)
	}
}

func apply(ctx context.Context, cfg *rest.Config, defaultNS string, files []string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	var objs []*unstructured.Unstructured
	for _, f := range files {
		o, err := readObjects(f)
		if err != nil {
			return err
		}
		objs = append(objs, o...)
	}

	var crds []string
	force := true
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		var mapping *meta.RESTMapping
		// A custom resource may follow its CRD in the same run: refresh
		// discovery until the new kind is served or the deadline passes.
		for {
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err == nil {
				break
			}
			if !meta.IsNoMatchError(err) {
				return err
			}
			mapper.Reset()
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %w", gvk, err)
			case <-time.After(500 * time.Millisecond):
			}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := u.GetNamespace()
			if ns == "" {
				ns = defaultNS
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		body, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: fieldManager, Force: &force}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, u.GetName(), err)
		}
		fmt.Printf("%s/%s serverside-applied\n", mapping.Resource.GroupResource(), u.GetName())
		if mapping.Resource.GroupResource() == crdGVR.GroupResource() {
			crds = append(crds, u.GetName())
		}
	}

	for _, name := range crds {
		if err := waitEstablished(ctx, dyn, name); err != nil {
			return err
		}
		fmt.Printf("customresourcedefinition.apiextensions.k8s.io/%s condition met (Established)\n", name)
	}
	return nil
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	for {
		u, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil && conditionTrue(u, "Established") && conditionTrue(u, "NamesAccepted") {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("not Established")
			}
			return fmt.Errorf("CRD %s: %w (%v)", name, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func conditionTrue(u *unstructured.Unstructured, condType string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == condType && m["status"] == "True" {
			return true
		}
	}
	return false
}
