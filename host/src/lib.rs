//! policyhost: a Kubernetes operator that runs per-object reconcile and cleanup
//! logic as sandboxed WebAssembly components.
