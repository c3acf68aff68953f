// standard-metrics is the reference the Rust tests hold policyhost's
// controller-runtime metric names against: the real controller-runtime
// v0.25.3, client-go and Prometheus code, not a copy of their names.
//
//	standard-metrics families
//
// prints, as JSON, every metric family a controller-runtime operator
// exports under the standard names (controller_runtime_*, workqueue_*,
// rest_client_*, leader_election_*, process_*), with its type, label names
// and histogram buckets, as controller-runtime's own code registers them.
//
//	standard-metrics dashboards --scrape FILE --scrape FILE --label k=v ... TEMPLATE.go...
//
// evaluates every query of kubebuilder's Grafana dashboards (the Go template
// files of its grafana plugin) with Prometheus' engine against the scrapes,
// and prints, as JSON, how many series each query finds.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

const usage = `usage:
  standard-metrics families
  standard-metrics dashboards --scrape FILE [--scrape FILE]... [--label NAME=VALUE]...
                              [--content-type TYPE] TEMPLATE.go...`

func main() {
	if len(os.Args) < 2 {
		fail(usage)
	}
	var out any
	var err error
	switch os.Args[1] {
	case "families":
		if len(os.Args) != 2 {
			fail("families takes no arguments\n" + usage)
		}
		out, err = families()
	case "dashboards":
		out, err = dashboards(os.Args[2:])
	case "-h", "-help", "--help", "help":
		fmt.Println(usage)
		return
	default:
		fail(fmt.Sprintf("unknown command %q\n%s", os.Args[1], usage))
	}
	if err != nil {
		fail(err.Error())
	}
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(out); err != nil {
		fail(fmt.Sprintf("cannot write the result: %v", err))
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "standard-metrics:", message)
	os.Exit(2)
}
