//! End-to-end tests for policyhost live in `tests/all`.
