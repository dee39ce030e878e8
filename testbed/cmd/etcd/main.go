// Command etcd is a single-member etcd for the local testbed, built from
// go.etcd.io/etcd/server/v3/embed. It is not a drop-in for the etcd binary:
// it takes only the few flags the testbed needs.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		log.Fatalf("bad URL %q: %v", s, err)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "data directory (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to listen on and advertise")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on and advertise")
	name := flag.String("name", "testbed", "member name")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	fsync := flag.Bool("fsync", false, "fsync writes (off by default: this is a throwaway test store)")
	showVersion := flag.Bool("version", false, "print the etcd version and exit")
	flag.Parse()

	if *showVersion {
		fmt.Printf("etcd Version: %s\nAPI Version: %s\n", version.Version, version.APIVersion)
		return
	}
	if *dataDir == "" {
		log.Fatal("--data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{mustURL(*clientURL)}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = []url.URL{mustURL(*peerURL)}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = !*fsync
	// Defaults that etcd's own flag parsing sets but embed.NewConfig leaves
	// at zero: without the first, every request is logged as "expensive".
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	// As kubeadm configures etcd for kube-apiserver's watch cache.
	cfg.WatchProgressNotifyInterval = 5 * time.Second

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	defer e.Close()

	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd %s ready on %s", version.Version, *clientURL)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd did not become ready within 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		log.Printf("received %v, shutting down", s)
	case err := <-e.Err():
		log.Fatalf("etcd error: %v", err)
	}
}
