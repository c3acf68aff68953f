//! The policyhost guest SDK.
