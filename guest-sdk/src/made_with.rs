//! The `policyhost-sdk` custom section every policy built with this SDK
//! carries: the language, this SDK's version and the world it targets, so
//! that a host refuses a policy built for a world it does not serve with a
//! reason naming both ([`export!`](crate::export) writes it into the
//! policy's own crate, which the linker always keeps).

/// The WIT world this SDK targets: the package of `wit/policy.wit`.
pub const WORLD: &str = "policyhost:reconcile@0.1.0";

/// This SDK's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The section's name.
pub const SECTION: &str = "policyhost-sdk";

/// The section's content, as JSON.
pub const TEXT: &str = concat!(
    r#"{"language":"rust","sdk":""#,
    env!("CARGO_PKG_VERSION"),
    r#"","world":"policyhost:reconcile@0.1.0"}"#
);

/// [`TEXT`] as the array a `link_section` static must be.
#[doc(hidden)]
pub const BYTES: [u8; TEXT.len()] = {
    let mut bytes = [0; TEXT.len()];
    let text = TEXT.as_bytes();
    let mut i = 0;
    while i < text.len() {
        bytes[i] = text[i];
        i += 1;
    }
    bytes
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_names_the_wit_packages_world_and_this_version() {
        let wit = include_str!("../wit/policy.wit");
        assert!(
            wit.lines().any(|line| line == format!("package {WORLD};")),
            "wit/policy.wit declares another package than {WORLD}"
        );
        let text: serde_json::Value = serde_json::from_slice(&BYTES).expect("JSON");
        assert_eq!(
            text,
            serde_json::json!({ "language": "rust", "sdk": VERSION, "world": WORLD })
        );
    }
}
