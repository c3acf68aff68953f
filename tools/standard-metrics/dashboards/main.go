// dashboards evaluates every query of kubebuilder's Grafana dashboards (the
// Go template files of its grafana plugin) with Prometheus' own scrape
// parser and PromQL engine against scrapes of an operator, and prints, as
// JSON, how many series each query finds.
//
//	dashboards --scrape FILE [--scrape FILE]... [--label NAME=VALUE]... [--content-type TYPE] TEMPLATE.go...
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

const usage = `usage: dashboards --scrape FILE [--scrape FILE]... [--label NAME=VALUE]...
                  [--content-type TYPE] TEMPLATE.go...`

func main() {
	found, err := dashboards(os.Args[1:])
	if err == nil {
		encoder := json.NewEncoder(os.Stdout)
		encoder.SetIndent("", "  ")
		encoder.SetEscapeHTML(false)
		err = encoder.Encode(found)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(2)
	}
}
