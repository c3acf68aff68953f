// Command peers runs the fanout policy's logic as a controller-runtime
// operator, in one of three styles (--mode, see modes.go): the peers of the
// project's operator in its benchmarks.
package main

import (
	"flag"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	var (
		modeName    string
		metricsAddr string
		workers     int
		qps         float64
		burst       int
		namespaces  []string
	)
	flag.StringVar(&modeName, "mode", "best", "naive, indexed or best")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", `address of /metrics ("0": none)`)
	flag.IntVar(&workers, "workers", 8, "DataJobs reconciled at once")
	flag.Float64Var(&qps, "qps", 0, "client-side rate limit of API requests per second (0: controller-runtime's default, none)")
	flag.IntVar(&burst, "burst", 0, "client-side burst of API requests (0: client-go's default)")
	flag.Func("namespace", "a namespace to watch (repeatable; default all; not in naive mode)", func(ns string) error {
		namespaces = append(namespaces, ns)
		return nil
	})
	logOptions := zap.Options{}
	logOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOptions)))
	log := ctrl.Log.WithName("peers")

	mode, err := parseMode(modeName)
	if err != nil {
		log.Error(err, "bad flags")
		os.Exit(2)
	}
	if mode == naive {
		namespaces = nil
	}

	// --kubeconfig is controller-runtime's own flag (else KUBECONFIG, the
	// in-cluster config, ~/.kube/config).
	config := ctrl.GetConfigOrDie()
	if qps != 0 {
		config.QPS = float32(qps)
	}
	if burst != 0 {
		config.Burst = burst
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(AddToScheme(scheme))

	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:  scheme,
		Cache:   mode.cacheOptions(namespaces),
		Metrics: metricsserver.Options{BindAddress: metricsAddr},
	})
	if err != nil {
		log.Error(err, "cannot create the manager")
		os.Exit(1)
	}
	reconciler := &Reconciler{
		Client:   mgr.GetClient(),
		mode:     mode,
		recorder: mgr.GetEventRecorder(instance),
	}
	ctx := ctrl.SetupSignalHandler()
	if err := reconciler.SetupWithManager(ctx, mgr, workers); err != nil {
		log.Error(err, "cannot set up the controller")
		os.Exit(1)
	}

	watched := "all"
	if len(namespaces) > 0 {
		watched = strings.Join(namespaces, ",")
	}
	log.Info("starting", "mode", mode, "workers", workers, "namespaces", watched,
		"qps", config.QPS, "burst", config.Burst, "metrics", metricsAddr)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
