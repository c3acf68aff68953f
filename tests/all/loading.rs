//! Load-time rejections: each names the problem, and nothing is run.

use std::time::{Duration, Instant};

use policyhost::policies::{Registry, Role, Version};
use policyhost::runtime::{Error, PolicyError, PolicyLimits, PolicySpec, Source};

use crate::common::{self, guest_bytes, variants};

fn load_error(bytes: &[u8]) -> Error {
    common::runtime()
        .load(PolicySpec::new("bad"), bytes)
        .expect_err("the component must be rejected")
}

#[test]
fn corrupt_bytes_are_rejected_as_corrupt() {
    let error = load_error(b"definitely not wasm");
    assert!(matches!(error, Error::Corrupt(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "policy is not a valid WebAssembly component"
    );
    let cause = std::error::Error::source(&error)
        .expect("a cause")
        .to_string();
    assert!(cause.contains("magic"), "{cause}");

    let fanout = guest_bytes("fanout");
    let truncated = &fanout[..fanout.len() / 2];
    assert!(matches!(load_error(truncated), Error::Corrupt(_)));
}

#[test]
fn a_core_module_is_rejected_as_not_a_component() {
    let module = wat::parse_str(r#"(module (func (export "reconcile")))"#).expect("wat");
    let error = load_error(&module);
    assert!(matches!(error, Error::CoreModule), "{error:?}");
    assert!(error.to_string().contains("wasm32-wasip2"));
}

#[test]
fn a_component_of_another_world_is_rejected_naming_the_export() {
    let empty = wat::parse_str("(component)").expect("wat");
    let error = load_error(&empty);
    assert!(
        matches!(error, Error::IncompatibleWorld { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("missing export `reconcile`"),
        "{error}"
    );

    let wrong_type = wat::parse_str(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "reconcile" (func $f))
            (export "cleanup" (func $f)))"#,
    )
    .expect("wat");
    let error = load_error(&wrong_type);
    assert!(
        matches!(error, Error::IncompatibleWorld { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("export `reconcile` has the wrong signature"),
        "{error}"
    );
}

#[test]
fn a_component_importing_a_wasi_interface_the_sandbox_does_not_link_is_rejected_naming_it() {
    let error = load_error(&guest_bytes("keyvalue-import"));
    match &error {
        Error::UnsupportedImport { import, .. } => {
            assert_eq!(import, "wasi:keyvalue/store@0.2.0-draft");
        }
        other => panic!("expected UnsupportedImport, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("which the sandbox does not provide"),
        "{message}"
    );
}

/// The reason a guest gave for failing, or a panic naming what it did instead.
fn guest_failure(name: &str, params: serde_json::Value) -> String {
    let runtime = common::runtime();
    let policy = common::load(&runtime, name, PolicyLimits::default());
    let outcome =
        runtime.reconcile_blocking(&policy, &common::input(common::job(name, "ns", params)));
    match outcome.result {
        Err(Error::PolicyError(PolicyError::Failed(message))) => message,
        other => panic!("{name}: expected the guest's own failure, got {other:?}"),
    }
}

/// `wasi:sockets` is linked so that Python and JavaScript policies load;
/// no socket is allowed, so a connect fails inside the guest.
#[test]
fn a_policy_that_connects_a_socket_loads_and_its_connect_is_refused() {
    let message = guest_failure("socket-import", serde_json::json!({}));
    assert!(message.starts_with("cannot connect: "), "{message}");
    assert!(
        message.to_lowercase().contains("denied") || message.contains("not allowed"),
        "{message}"
    );
}

/// `wasi:filesystem` is linked with no directory preopened: a read finds
/// nothing, whatever the path.
#[test]
fn a_policy_that_reads_a_file_loads_and_finds_no_file_system() {
    for path in ["/etc/hostname", "Cargo.toml", "."] {
        let message = guest_failure("fs-read", serde_json::json!({ "path": path }));
        assert!(
            message.starts_with(&format!("cannot read {path}: ")),
            "{message}"
        );
    }
}

#[test]
fn fanout_imports_only_what_the_sandbox_links() {
    let runtime = common::runtime();
    let fanout = runtime
        .load(PolicySpec::new("fanout"), &guest_bytes("fanout"))
        .expect("load");
    for import in fanout.imports() {
        assert!(
            !import.starts_with("wasi:filesystem") && !import.starts_with("wasi:sockets"),
            "{import}"
        );
    }
}

#[test]
fn a_component_importing_an_unknown_interface_is_rejected_naming_it() {
    let component = wat::parse_str(
        r#"(component
            (import "acme:evil/exfiltrate@1.0.0" (instance (export "send" (func (param "x" string))))))"#,
    )
    .expect("wat");
    let error = load_error(&component);
    assert!(
        matches!(&error, Error::UnsupportedImport { import, .. } if import == "acme:evil/exfiltrate@1.0.0"),
        "{error:?}"
    );
}

#[test]
fn fanout_loads_and_a_second_load_hits_the_digest_cache() {
    let runtime = common::runtime();
    let bytes = guest_bytes("fanout");
    let started = Instant::now();
    let first = runtime
        .load(PolicySpec::new("fanout"), &bytes)
        .expect("load");
    let compile = started.elapsed();
    assert_eq!(first.source(), Source::Compiled);
    let started = Instant::now();
    let second = runtime
        .load(PolicySpec::new("fanout"), &bytes)
        .expect("reload");
    let hit = started.elapsed();
    assert_eq!(second.source(), Source::Memory);
    assert_eq!(first.digest(), second.digest());
    let stats = runtime.cache_stats();
    assert_eq!((stats.compiles, stats.memory_hits), (1, 1));
    eprintln!("first compile {compile:?}, cache hit {hit:?}");
    assert!(hit < Duration::from_millis(50), "cache hit took {hit:?}");
}

#[test]
fn the_compile_cache_holds_only_the_versions_in_use() {
    let runtime = common::runtime();
    let registry = Registry::new();
    let fanout = guest_bytes("fanout");
    let input = policyhost::runtime::reference::fanout(2);
    let swaps = 20;
    for i in 0..swaps {
        let bytes = variants::version(&fanout, &i.to_string());
        let policy = runtime
            .load(PolicySpec::new("fanout"), &bytes)
            .expect("load");
        // Its instances take pool slots (and its memory image with them).
        runtime
            .reconcile_blocking(&policy, &input)
            .result
            .expect("reconcile");
        registry.install(Role::Serving, Version::of(policy));
        assert_eq!(
            runtime.cache_stats().resident,
            1,
            "after swap {i}: the version in service only"
        );
    }
    assert_eq!(runtime.cache_stats().compiles, swaps);

    // A call in flight keeps its version after the policy is deleted...
    let in_flight = registry.get("fanout").expect("in service");
    let serving = in_flight.digest();
    registry.remove(Role::Serving, "fanout");
    assert_eq!(runtime.cache_stats().resident, 1);
    let again = runtime
        .load(
            PolicySpec::new("fanout"),
            &variants::version(&fanout, &(swaps - 1).to_string()),
        )
        .expect("load");
    assert_eq!((again.digest(), again.source()), (serving, Source::Memory));
    drop(again);
    // ...and its end takes it out of the cache.
    drop(in_flight);
    assert_eq!(runtime.cache_stats().resident, 0);
}
