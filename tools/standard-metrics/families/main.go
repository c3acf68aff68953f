// families prints, as JSON, every metric family a controller-runtime
// operator exports under the standard names (controller_runtime_*,
// workqueue_*, rest_client_*, leader_election_*, process_*), with its type,
// label names and histogram buckets, as controller-runtime's own code
// (v0.25.3) registers them: the reference the Rust tests hold policyhost's
// standard metrics against, not a copy of their names.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: families (it takes no arguments)")
		os.Exit(2)
	}
	listed, err := families()
	if err == nil {
		encoder := json.NewEncoder(os.Stdout)
		encoder.SetIndent("", "  ")
		err = encoder.Encode(listed)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "families:", err)
		os.Exit(2)
	}
}
