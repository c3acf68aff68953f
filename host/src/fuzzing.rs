//! Entry points of the fuzz targets in `fuzz/` over what another team controls: the
//! policy ConfigMap a team writes, the result a policy returns and the origins of its
//! outbound requests. The test suite replays their corpus.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use serde_json::Value;

use crate::policies::configmap::{Module, Settings};
use crate::runtime::output::{AllowedKind, scanner_agrees_with_serde, validate};
use crate::runtime::{DesiredChild, Limits, ReconcileResult, Status};

/// The most a fuzzed component may inflate to.
const MODULE_LIMIT: u64 = 1 << 20;

/// A policy ConfigMap: `data` up to the first NUL byte is its `data`, one `key=value`
/// per line; the rest is its gzipped component. Settings that parse write back to data
/// that parses to the same settings, and no stream inflates past its limit.
pub fn policy_configmap(data: &[u8]) {
    let (text, module) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let map: BTreeMap<String, String> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if let Ok(settings) = Settings::parse(&map) {
        let written = settings.to_data();
        let again = Settings::parse(&written);
        assert_eq!(again.as_ref().ok(), Some(&settings), "{written:?}");
    }
    let binary = BTreeMap::from([(
        crate::policies::configmap::MODULE_GZ_KEY.to_owned(),
        ByteString(module.to_vec()),
    )]);
    if let Ok(Ok(bytes)) = Module::find(&binary).map(|m| m.decode(MODULE_LIMIT)) {
        assert!(bytes.len() as u64 <= MODULE_LIMIT);
    }
}

/// A manifest a policy returns (`data`, when it is UTF-8, as WIT strings are): the fast
/// scanner answers as `serde_json` does, and the whole check of a result carrying it
/// as a child and as its status outputs, a credential redacted from it, answers
/// without panicking.
pub fn guest_output(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    scanner_agrees_with_serde(text);
    // The record names what the manifest says, so the checks go past the comparison.
    let parsed: Value = serde_json::from_str(text).unwrap_or_default();
    let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let child = DesiredChild {
        api_version: field(&parsed["apiVersion"]),
        kind: field(&parsed["kind"]),
        name: field(&parsed["metadata"]["name"]),
        manifest: text.to_owned(),
    };
    let result = ReconcileResult {
        children: vec![child],
        status: Status {
            phase: "Running".into(),
            message: String::new(),
            conditions: Vec::new(),
            outputs: text.to_owned(),
        },
        requeue_after_ms: None,
        events: Vec::new(),
    };
    let kinds = AllowedKind::defaults();
    // A value with characters JSON escapes, so that escaped text is decoded.
    let redactor = crate::outbound::Redactor::new([br#"Bearer "a\b"#.as_slice()])
        .expect("a redactor of one value");
    let _verdict = validate(result, "ns", &kinds, &Limits::default(), &redactor);
}

/// A grant's origin pattern and a request's authority (`data` split at its first NUL):
/// neither parse panics; an origin written back parses to itself; a wildcard never
/// admits an address nor the name it stands below; and a pattern names an address
/// only if it admits it.
pub fn outbound_origin(data: &[u8]) {
    use crate::outbound::origin::{Host, HostPattern, Origin, OriginPattern, Scheme};
    let text = String::from_utf8_lossy(data);
    let (pattern, authority) = text.split_once('\0').unwrap_or((&text, ""));
    let pattern = OriginPattern::parse(pattern).ok();
    for scheme in [Scheme::Http, Scheme::Https] {
        let Some(origin) = Origin::of(scheme, authority) else {
            continue;
        };
        let written = format!("{}:{}", origin.host, origin.port);
        assert_eq!(
            Origin::of(scheme, &written).as_ref(),
            Some(&origin),
            "{written}"
        );
        let Some(pattern) = &pattern else {
            continue;
        };
        let admitted = pattern.admits(&origin);
        if let (HostPattern::Below(suffix), true) = (&pattern.host, admitted) {
            let Host::Name(name) = &origin.host else {
                panic!("{pattern} admits the address {origin}");
            };
            assert!(
                name.len() > suffix.len() && name.ends_with(suffix.as_str()),
                "{pattern} admits {origin}"
            );
        }
        if let Host::Ip(ip) = origin.host {
            let same_scheme_and_port =
                pattern.scheme == scheme && pattern.port.is_none_or(|port| port == origin.port);
            if pattern.names_address(ip) && same_scheme_and_port {
                assert!(admitted, "{pattern} names {ip} but does not admit {origin}");
            }
        }
    }
}
