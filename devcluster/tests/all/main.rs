//! devcluster integration tests.
