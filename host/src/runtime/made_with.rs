//! What a component says it was built with: the SDK's language and version
//! and the WIT world it targets, from its `policyhost-sdk` custom section.
//!
//! Each SDK writes the section (Rust from its `export!` macro, into the
//! policy's core module; Python and TypeScript on the component itself when
//! they build it), so that a component built for a world this host does not
//! serve is refused before it is compiled, with a reason naming both
//! worlds, rather than failing to link on an import's version. The section
//! is the author's word, not a proof: the link checks that follow still
//! hold the component to the world's types. A component without the section
//! (built without an SDK) is judged by those checks alone.

use std::fmt;

use serde::{Deserialize, Serialize};
use wasmparser::{Parser, Payload};

/// The custom section's name.
pub const SECTION: &str = "policyhost-sdk";

/// The world this host serves, as the WIT package names it.
pub const SERVED_WORLD: &str = "policyhost:reconcile@0.1.0";

/// The largest section read: the three short fields as JSON fit in a
/// fraction of it.
const MAX_SECTION_BYTES: usize = 1024;

/// The longest field, and the characters it may hold: the fields go into
/// annotations, messages and `policy list`'s table.
const MAX_FIELD_CHARS: usize = 64;

/// The SDK a component was built with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MadeWith {
    /// `rust`, `python` or `typescript`.
    pub language: String,
    /// The SDK's version, e.g. `0.1.0`.
    pub sdk: String,
    /// The world it targets, e.g. `policyhost:reconcile@0.1.0`.
    pub world: String,
}

impl MadeWith {
    /// `rust 0.1.0`: the language and the SDK's version, as `policy list`
    /// shows them.
    #[must_use]
    pub fn label(&self) -> String {
        format!("{} {}", self.language, self.sdk)
    }
}

impl fmt::Display for MadeWith {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} SDK {}", self.language, self.sdk)
    }
}

/// Why a component's section was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The section is not what an SDK writes.
    #[error("its `{SECTION}` section is malformed: {0}")]
    Malformed(String),
    /// It targets a world this host does not serve.
    #[error(
        "it was built with the {made_with} for world `{}`; this host serves `{SERVED_WORLD}`: rebuild it with an SDK for `{SERVED_WORLD}`, or run a host that serves `{}`",
        made_with.world,
        made_with.world
    )]
    UnservedWorld {
        /// What the section says.
        made_with: MadeWith,
    },
}

/// Reads the sections of `bytes`, a component (its own, and its core
/// modules'), and checks each one's world against [`SERVED_WORLD`]: a
/// component is served only if every section it carries says so (one
/// composed of parts built for several worlds is refused by the first it
/// is not served). `None`: no section. Malformed WebAssembly is left to
/// the compiler to name.
pub fn read(bytes: &[u8]) -> Result<Option<MadeWith>, Refused> {
    let mut first = None;
    for data in sections(bytes) {
        let made_with = parse(data)?;
        if !served(&made_with.world) {
            return Err(Refused::UnservedWorld { made_with });
        }
        first.get_or_insert(made_with);
    }
    Ok(first)
}

/// One section's content, checked to be what an SDK writes.
fn parse(data: &[u8]) -> Result<MadeWith, Refused> {
    if data.len() > MAX_SECTION_BYTES {
        return Err(Refused::Malformed(format!(
            "{} bytes, more than {MAX_SECTION_BYTES}",
            data.len()
        )));
    }
    let made_with: MadeWith =
        serde_json::from_slice(data).map_err(|e| Refused::Malformed(e.to_string()))?;
    for (field, value) in [
        ("language", &made_with.language),
        ("sdk", &made_with.sdk),
        ("world", &made_with.world),
    ] {
        let printable = value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:@/+".contains(c));
        if value.is_empty() || value.len() > MAX_FIELD_CHARS || !printable {
            return Err(Refused::Malformed(format!(
                "`{field}` must be 1 to {MAX_FIELD_CHARS} letters, digits or -_.:@/+"
            )));
        }
    }
    Ok(made_with)
}

/// Every `policyhost-sdk` section's bytes, at any depth, in the order of
/// the binary.
fn sections(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    Parser::new(0)
        .parse_all(bytes)
        .map_while(Result::ok)
        .filter_map(|payload| match payload {
            Payload::CustomSection(custom) if custom.name() == SECTION => Some(custom.data()),
            _ => None,
        })
}

/// Whether this host serves `world`: the same package, a version of the
/// same compatibility line (the major version; below 1.0 the minor), and
/// none newer than the host's: a component for a newer patch may use what
/// this host does not have.
fn served(world: &str) -> bool {
    let (Some((package, version)), Some((served_package, served_version))) =
        (world.split_once('@'), SERVED_WORLD.split_once('@'))
    else {
        return false;
    };
    let (Some(version), Some(served_version)) = (numbers(version), numbers(served_version)) else {
        return false;
    };
    let line = |[major, minor, _]: [u64; 3]| if major == 0 { (0, minor) } else { (major, 0) };
    package == served_package && line(version) == line(served_version) && version <= served_version
}

/// `MAJOR.MINOR.PATCH` as numbers; `None` for anything else.
fn numbers(version: &str) -> Option<[u64; 3]> {
    let mut parts = version.split('.').map(|part| part.parse::<u64>().ok());
    let numbers = [parts.next()??, parts.next()??, parts.next()??];
    parts.next().is_none().then_some(numbers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty component's header (layer 1, version 0x0d).
    const EMPTY: &[u8] = b"\0asm\x0d\0\x01\0";

    /// `bytes` with a custom section appended, as the SDKs append theirs.
    fn with_section(mut bytes: Vec<u8>, name: &str, data: &[u8]) -> Vec<u8> {
        let leb = |mut n: usize, out: &mut Vec<u8>| loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        };
        let mut payload = Vec::new();
        leb(name.len(), &mut payload);
        payload.extend_from_slice(name.as_bytes());
        payload.extend_from_slice(data);
        bytes.push(0);
        leb(payload.len(), &mut bytes);
        bytes.extend(payload);
        bytes
    }

    /// A component holding `data` as the section, after another section.
    fn component(data: &[u8]) -> Vec<u8> {
        let other = with_section(EMPTY.to_vec(), "producers-of-something-else", b"{}");
        with_section(other, SECTION, data)
    }

    fn made_with(world: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "language": "python", "sdk": "0.1.0", "world": world
        }))
        .expect("json")
    }

    #[test]
    fn the_served_world_and_its_earlier_patches_are_served_and_named() {
        assert_eq!(
            read(&component(&made_with(SERVED_WORLD))),
            Ok(Some(MadeWith {
                language: "python".into(),
                sdk: "0.1.0".into(),
                world: SERVED_WORLD.into(),
            }))
        );
        assert!(served("policyhost:reconcile@0.1.0"));
        assert!(!served("policyhost:reconcile@0.1.1"), "a newer patch");
        assert!(!served("policyhost:reconcile@0.2.0"));
        assert!(!served("policyhost:reconcile@1.1.0"));
        assert!(!served("other:reconcile@0.1.0"));
        assert!(!served("policyhost:reconcile"));
        assert!(!served("policyhost:reconcile@0.1.0-rc.1"));
    }

    #[test]
    fn a_component_for_another_world_is_refused_naming_both_worlds() {
        let refused =
            read(&component(&made_with("policyhost:reconcile@0.2.0"))).expect_err("another world");
        let text = refused.to_string();
        assert!(
            text.contains("python SDK 0.1.0")
                && text.contains("`policyhost:reconcile@0.2.0`")
                && text.contains(&format!("serves `{SERVED_WORLD}`")),
            "{text}"
        );
    }

    #[test]
    fn every_section_must_name_a_served_world() {
        let served = component(&made_with(SERVED_WORLD));
        let twice = with_section(served.clone(), SECTION, &made_with(SERVED_WORLD));
        assert!(matches!(read(&twice), Ok(Some(_))));
        let also_another = with_section(served, SECTION, &made_with("policyhost:reconcile@0.2.0"));
        assert!(matches!(
            read(&also_another),
            Err(Refused::UnservedWorld { made_with }) if made_with.world.ends_with("@0.2.0")
        ));
    }

    #[test]
    fn no_section_is_none_and_a_malformed_one_is_refused_saying_how() {
        assert_eq!(read(EMPTY), Ok(None));
        assert_eq!(read(b"not wasm"), Ok(None), "left to the compiler");
        for (data, why) in [
            (b"{".to_vec(), "EOF"),
            (vec![b' '; MAX_SECTION_BYTES + 1], "more than 1024"),
            (
                br#"{"language":"py\nthon","sdk":"0.1.0","world":"policyhost:reconcile@0.1.0"}"#
                    .to_vec(),
                "`language` must be",
            ),
            (
                br#"{"language":"python","sdk":"","world":"policyhost:reconcile@0.1.0"}"#.to_vec(),
                "`sdk` must be",
            ),
            (
                br#"{"language":"python","sdk":"0.1.0","world":"policyhost:reconcile@0.1.0","x":1}"#
                    .to_vec(),
                "unknown field",
            ),
        ] {
            let refused = read(&component(&data)).expect_err(why);
            assert!(
                matches!(&refused, Refused::Malformed(text) if text.contains(why)),
                "{why}: {refused}"
            );
        }
    }

    #[test]
    fn the_served_world_is_the_wit_packages() {
        let wit = include_str!("../../../wit/policy.wit");
        assert!(
            wit.lines()
                .any(|line| line == format!("package {SERVED_WORLD};")),
            "wit/policy.wit declares another package than {SERVED_WORLD}"
        );
    }
}
