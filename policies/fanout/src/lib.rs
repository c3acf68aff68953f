//! Runs a DataJob as N worker Pods.
