//! Kubernetes' rules for object names, label keys, label values, ConfigMap
//! keys and environment variable names, as apimachinery's
//! `util/validation` states them.
//!
//! One implementation for everything that checks a name: the SDK's
//! builders, the host's checks of a policy's output, policy names and
//! devcluster's API server. Each caller words its own error around the
//! [`Violation`]: the SDK names the field, devcluster answers as
//! kube-apiserver does.
//!
//! No dependencies: the SDK compiles it into every policy.

#![no_std]

use core::fmt;

/// The rule a text breaks, in words that complete "… is invalid: ".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation(&'static str);

impl Violation {
    /// The rule, e.g. `must be at most 63 characters`.
    #[must_use]
    pub const fn reason(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// `Ok` when the text follows the rule.
pub type Verdict = Result<(), Violation>;

const EMPTY: Violation = Violation("must not be empty");
const OVER_63: Violation = Violation("must be at most 63 characters");
const OVER_253: Violation = Violation("must be at most 253 characters");
const ENDS: Violation = Violation("must start and end with a letter or digit");

/// Byte classes, one bit each, so that every rule below is one table
/// lookup per byte: these checks run for every label of every child a
/// policy returns.
const LOWER: u8 = 1; // a-z
const UPPER: u8 = 2; // A-Z
const DIGIT: u8 = 4; // 0-9
const DASH: u8 = 8; // -
const DOT: u8 = 16; // .
const UNDERSCORE: u8 = 32; // _

static CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b'a'..=b'z' => LOWER,
            b'A'..=b'Z' => UPPER,
            b'0'..=b'9' => DIGIT,
            b'-' => DASH,
            b'.' => DOT,
            b'_' => UNDERSCORE,
            _ => 0,
        };
        b += 1;
    }
    table
};

fn is(byte: u8, classes: u8) -> bool {
    CLASS[usize::from(byte)] & classes != 0
}

/// Every byte of `text` is in one of the `classes`.
fn all_in(text: &str, classes: u8) -> bool {
    text.bytes().all(|b| is(b, classes))
}

/// A DNS-1123 label: at most 63 lower-case alphanumerics or `-`, starting
/// and ending with an alphanumeric (policy names, container names, Jobs).
///
/// # Errors
///
/// The rule the name breaks.
pub fn dns1123_label(name: &str) -> Verdict {
    if name.is_empty() {
        return Err(EMPTY);
    }
    if name.len() > 63 {
        return Err(OVER_63);
    }
    if !all_in(name, LOWER | DIGIT | DASH) {
        return Err(Violation(
            "must consist of lower-case letters, digits and '-'",
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(ENDS);
    }
    Ok(())
}

/// A DNS-1123 subdomain: at most 253 characters of dot-separated DNS-1123
/// labels (most object names: Pods, ConfigMaps).
///
/// # Errors
///
/// The rule the name breaks.
pub fn dns1123_subdomain(name: &str) -> Verdict {
    if name.is_empty() {
        return Err(EMPTY);
    }
    if name.len() > 253 {
        return Err(OVER_253);
    }
    // One pass: the allowed bytes, and each dot-separated part starting and
    // ending with an alphanumeric (no dot or dash at either end, no dot next
    // to a dot or a dash).
    let mut bad_part = false;
    let mut previous = b'.';
    for b in name.bytes() {
        if !is(b, LOWER | DIGIT | DASH | DOT) {
            return Err(Violation(
                "must consist of lower-case letters, digits, '-' and '.'",
            ));
        }
        bad_part |= (b == b'.' && is(previous, DASH | DOT)) || (previous == b'.' && is(b, DASH));
        previous = b;
    }
    if bad_part || is(previous, DASH | DOT) {
        return Err(Violation(
            "each dot-separated part must start and end with a letter or digit",
        ));
    }
    Ok(())
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter (Service
/// names).
///
/// # Errors
///
/// The rule the name breaks.
pub fn dns1035_label(name: &str) -> Verdict {
    dns1123_label(name)?;
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err(Violation("must start with a lower-case letter"))
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters; empty
/// only if `allow_empty`.
fn qualified_part(part: &str, allow_empty: bool) -> Verdict {
    if part.is_empty() {
        return if allow_empty { Ok(()) } else { Err(EMPTY) };
    }
    if part.len() > 63 {
        return Err(OVER_63);
    }
    if !all_in(part, LOWER | UPPER | DIGIT | DASH | UNDERSCORE | DOT) {
        return Err(Violation(
            "must consist of letters, digits, '-', '_' and '.'",
        ));
    }
    let bytes = part.as_bytes();
    if !is(bytes[0], LOWER | UPPER | DIGIT) || !is(bytes[bytes.len() - 1], LOWER | UPPER | DIGIT) {
        return Err(ENDS);
    }
    Ok(())
}

/// A label or annotation key (a qualified name): an optional DNS-1123
/// subdomain prefix and `/`, then a name of at most 63 letters, digits,
/// `-`, `_` and `.`, alphanumeric at both ends.
///
/// # Errors
///
/// The rule the key breaks.
pub fn label_key(key: &str) -> Verdict {
    // A byte scan: keys are short, and a char searcher costs more to set up.
    let (prefix, name) = match key.bytes().position(|b| b == b'/') {
        Some(slash) => (Some(&key[..slash]), &key[slash + 1..]),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        dns1123_subdomain(prefix)?;
    }
    qualified_part(name, false)
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_` and `.`,
/// alphanumeric at both ends.
///
/// # Errors
///
/// The rule the value breaks.
pub fn label_value(value: &str) -> Verdict {
    qualified_part(value, true)
}

/// An environment variable name: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
///
/// # Errors
///
/// The rule the name breaks.
pub fn env_var_name(name: &str) -> Verdict {
    let valid_start = name
        .bytes()
        .next()
        .is_some_and(|b| is(b, LOWER | UPPER | DASH | DOT | UNDERSCORE));
    if valid_start && all_in(name, LOWER | UPPER | DIGIT | DASH | DOT | UNDERSCORE) {
        Ok(())
    } else {
        Err(Violation(
            "must consist of letters, digits, '-', '.' and '_', not starting with a digit",
        ))
    }
}

/// A ConfigMap or Secret key: `[-._a-zA-Z0-9]+`, at most 253 characters,
/// not `.` or `..`.
///
/// # Errors
///
/// The rule the key breaks.
pub fn config_map_key(key: &str) -> Verdict {
    let valid = !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && all_in(key, LOWER | UPPER | DIGIT | DASH | DOT | UNDERSCORE);
    if valid {
        Ok(())
    } else {
        Err(Violation(
            "must be 1-253 letters, digits, '-', '.' or '_', and not '.' or '..'",
        ))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;

    use super::*;

    fn long(n: usize) -> String {
        "a".repeat(n)
    }

    #[test]
    fn dns1123_labels_follow_the_kubernetes_rules() {
        for good in ["a", "worker-0", "0abc", &long(63)] {
            assert_eq!(dns1123_label(good), Ok(()), "{good}");
        }
        for (bad, reason) in [
            ("", "must not be empty"),
            ("-a", "must start and end with a letter or digit"),
            ("a-", "must start and end with a letter or digit"),
            ("A", "must consist of lower-case letters, digits and '-'"),
            ("a.b", "must consist of lower-case letters, digits and '-'"),
            ("a_b", "must consist of lower-case letters, digits and '-'"),
            (&long(64), "must be at most 63 characters"),
        ] {
            assert_eq!(
                dns1123_label(bad).map_err(Violation::reason),
                Err(reason),
                "{bad}"
            );
        }
    }

    #[test]
    fn dns1123_subdomains_allow_dots_between_labels() {
        for good in ["a.b", "job-worker-0", "x.y-z.0", "a-b.c", &long(253)] {
            assert_eq!(dns1123_subdomain(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a.-b",
            "a-.b",
            "Upper",
            "under_score",
            "ä",
            "a\nb",
            &long(254),
        ] {
            assert!(dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns1035_labels_start_with_a_letter() {
        assert_eq!(dns1035_label("svc-1"), Ok(()));
        assert_eq!(
            dns1035_label("1svc").map_err(Violation::reason),
            Err("must start with a lower-case letter")
        );
        assert!(dns1035_label("a.b").is_err());
    }

    #[test]
    fn label_keys_take_an_optional_subdomain_prefix() {
        for good in ["app", "app.kubernetes.io/name", "A_b.c-D", "x/y"] {
            assert_eq!(label_key(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "/a",
            "Example.com/a",
            "a/",
            "a/-b",
            "-a",
            &long(64),
            "a/b/c",
        ] {
            assert!(label_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn label_values_may_be_empty() {
        for good in ["", "v1", "A.b_c-D"] {
            assert_eq!(label_value(good), Ok(()), "{good}");
        }
        for bad in ["-a", "a ", "a/b", &long(64)] {
            assert!(label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_var_names_and_config_keys() {
        assert_eq!(env_var_name("JAVA_OPTS"), Ok(()));
        assert_eq!(env_var_name(".x-1"), Ok(()));
        assert!(env_var_name("1X").is_err());
        assert!(env_var_name("").is_err());
        assert!(env_var_name("A B").is_err());
        assert_eq!(config_map_key("app.properties"), Ok(()));
        for bad in ["", ".", "..", "a/b", &long(254)] {
            assert!(config_map_key(bad).is_err(), "{bad}");
        }
    }
}

/// `cases.json`: the cases every implementation of these rules (the Python
/// and TypeScript SDKs too) must agree on.
#[cfg(test)]
mod shared_cases {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn every_rule_agrees_with_the_shared_cases() {
        let text = include_str!("../cases.json");
        let document: serde_json::Value = serde_json::from_str(text).unwrap();
        let rules = document["rules"].as_object().unwrap();
        for (rule, cases) in rules {
            let check: fn(&str) -> Verdict = match rule.as_str() {
                "dns1123Label" => dns1123_label,
                "dns1123Subdomain" => dns1123_subdomain,
                "dns1035Label" => dns1035_label,
                "labelKey" => label_key,
                "labelValue" => label_value,
                "envVarName" => env_var_name,
                "configMapKey" => config_map_key,
                other => panic!("no rule {other}"),
            };
            for case in cases.as_array().unwrap() {
                let text = case["text"].as_str().unwrap();
                let reason = case["reason"].as_str();
                assert_eq!(
                    check(text).err().map(Violation::reason),
                    reason,
                    "{rule}({text:?})"
                );
            }
        }
        assert_eq!(
            rules.len(),
            7,
            "{:?}",
            rules.keys().map(ToString::to_string)
        );
    }
}
