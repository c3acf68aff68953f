//! devcluster: a Kubernetes-compatible API server for development and tests.
