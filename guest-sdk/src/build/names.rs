//! Kubernetes name and label validation (apimachinery's `validation` rules).

use super::{Error, Result};

/// A DNS-1123 label: at most 63 lower-case alphanumerics or `-`, starting
/// and ending with an alphanumeric (container names, Service ports, Jobs).
#[must_use]
pub fn is_dns1123_label(name: &str) -> bool {
    label_reason(name).is_none()
}

/// A DNS-1123 subdomain: at most 253 characters of dot-separated DNS-1123
/// labels (Pod, ConfigMap names).
#[must_use]
pub fn is_dns1123_subdomain(name: &str) -> bool {
    subdomain_reason(name).is_none()
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter (Service names).
#[must_use]
pub fn is_dns1035_label(name: &str) -> bool {
    label_reason(name).is_none() && name.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Byte classes, one bit each, so that every rule below is one table
/// lookup per byte (these checks run for every label of every child).
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

/// Every byte of `text` is in one of the `classes`.
fn all_in(text: &str, classes: u8) -> bool {
    text.bytes().all(|b| CLASS[usize::from(b)] & classes != 0)
}

fn is(byte: u8, classes: u8) -> bool {
    CLASS[usize::from(byte)] & classes != 0
}

fn label_reason(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("must not be empty");
    }
    if name.len() > 63 {
        return Some("must be at most 63 characters");
    }
    if !all_in(name, LOWER | DIGIT | DASH) {
        return Some("must consist of lower-case letters, digits and '-'");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("must start and end with a letter or digit");
    }
    None
}

fn subdomain_reason(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("must not be empty");
    }
    if name.len() > 253 {
        return Some("must be at most 253 characters");
    }
    // One pass: the allowed bytes, and each dot-separated part starting and
    // ending with an alphanumeric (no dot or dash at either end, no dot next
    // to a dot or a dash).
    let mut bad_part = false;
    let mut previous = b'.';
    for b in name.bytes() {
        if !is(b, LOWER | DIGIT | DASH | DOT) {
            return Some("must consist of lower-case letters, digits, '-' and '.'");
        }
        bad_part |= (b == b'.' && is(previous, DASH | DOT)) || (previous == b'.' && is(b, DASH));
        previous = b;
    }
    if bad_part || is(previous, DASH | DOT) {
        return Some("each dot-separated part must start and end with a letter or digit");
    }
    None
}

fn invalid(what: &'static str, value: &str, reason: &'static str) -> Error {
    Error::Invalid {
        what,
        value: value.to_owned(),
        reason,
    }
}

pub(super) fn check_label(what: &'static str, name: &str) -> Result<()> {
    label_reason(name).map_or(Ok(()), |reason| Err(invalid(what, name, reason)))
}

pub(super) fn check_subdomain(what: &'static str, name: &str) -> Result<()> {
    subdomain_reason(name).map_or(Ok(()), |reason| Err(invalid(what, name, reason)))
}

pub(super) fn check_dns1035(what: &'static str, name: &str) -> Result<()> {
    check_label(what, name)?;
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err(invalid(what, name, "must start with a lower-case letter"))
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters; empty
/// only if `allow_empty`.
fn qualified_part_reason(part: &str, allow_empty: bool) -> Option<&'static str> {
    if part.is_empty() {
        return (!allow_empty).then_some("must not be empty");
    }
    if part.len() > 63 {
        return Some("must be at most 63 characters");
    }
    if !all_in(part, LOWER | UPPER | DIGIT | DASH | UNDERSCORE | DOT) {
        return Some("must consist of letters, digits, '-', '_' and '.'");
    }
    let bytes = part.as_bytes();
    if !is(bytes[0], LOWER | UPPER | DIGIT) || !is(bytes[bytes.len() - 1], LOWER | UPPER | DIGIT) {
        return Some("must start and end with a letter or digit");
    }
    None
}

/// A label or annotation key: an optional DNS subdomain prefix and `/`, then
/// a qualified name.
pub(super) fn check_key(what: &'static str, key: &str) -> Result<()> {
    // A byte scan: keys are short, and a char searcher costs more to set up.
    let (prefix, name) = match key.bytes().position(|b| b == b'/') {
        Some(slash) => (Some(&key[..slash]), &key[slash + 1..]),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && let Some(reason) = subdomain_reason(prefix)
    {
        return Err(invalid(what, key, reason));
    }
    qualified_part_reason(name, false).map_or(Ok(()), |reason| Err(invalid(what, key, reason)))
}

/// A label value: empty, or a qualified name of at most 63 characters.
pub(super) fn check_label_value(value: &str) -> Result<()> {
    qualified_part_reason(value, true)
        .map_or(Ok(()), |reason| Err(invalid("label value", value, reason)))
}

/// An environment variable name: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub(super) fn check_env_name(name: &str) -> Result<()> {
    let valid_start = name
        .bytes()
        .next()
        .is_some_and(|b| is(b, LOWER | UPPER | DASH | DOT | UNDERSCORE));
    if valid_start && all_in(name, LOWER | UPPER | DIGIT | DASH | DOT | UNDERSCORE) {
        Ok(())
    } else {
        Err(invalid(
            "environment variable name",
            name,
            "must consist of letters, digits, '-', '.' and '_', not starting with a digit",
        ))
    }
}

/// A ConfigMap key: `[-._a-zA-Z0-9]+`, at most 253 characters, not `.` or `..`.
pub(super) fn check_config_key(key: &str) -> Result<()> {
    let valid = !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if valid {
        Ok(())
    } else {
        Err(invalid(
            "ConfigMap key",
            key,
            "must be 1-253 letters, digits, '-', '.' or '_', and not '.' or '..'",
        ))
    }
}

/// A resource quantity: a decimal number with an optional SI or binary suffix
/// or exponent, e.g. `100m`, `1.5`, `128Mi`, `1e3`.
pub(super) fn check_quantity(value: &str) -> Result<()> {
    const SUFFIXES: [&str; 14] = [
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let unsigned = value.strip_prefix(['+', '-']).unwrap_or(value);
    let digits_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(digits_end);
    let number_ok = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    let suffix_ok = SUFFIXES.contains(&suffix)
        || suffix
            .strip_prefix(['e', 'E'])
            .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
            .is_some_and(|exp| !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit()));
    if number_ok && suffix_ok {
        Ok(())
    } else {
        Err(invalid(
            "resource quantity",
            value,
            "must be a number with an optional unit such as m, Mi or Gi",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels_follow_the_kubernetes_rules() {
        for good in ["a", "worker-0", "0abc", &"a".repeat(63)] {
            assert!(is_dns1123_label(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn dns1123_subdomains_allow_dots_between_labels() {
        for good in ["a.b", "job-worker-0", "x.y-z.0"] {
            assert!(is_dns1123_subdomain(good), "{good}");
        }
        for bad in ["", ".a", "a.", "a..b", "a.-b", "Upper", &"a".repeat(254)] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn dns1035_labels_start_with_a_letter() {
        assert!(is_dns1035_label("svc-1"));
        assert!(!is_dns1035_label("1svc"));
    }

    #[test]
    fn label_keys_may_have_a_domain_prefix() {
        assert!(check_key("label key", "app").is_ok());
        assert!(check_key("label key", "policyhost.dev/datajob").is_ok());
        assert!(check_key("label key", "app.kubernetes.io/name").is_ok());
        assert!(check_key("label key", "Bad_Prefix/x").is_err());
        assert!(check_key("label key", "x/").is_err());
        assert!(check_key("label key", "-x").is_err());
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed() {
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("v1.2_3-x").is_ok());
        assert!(check_label_value("has space").is_err());
        assert!(check_label_value(&"v".repeat(64)).is_err());
    }

    #[test]
    fn quantities_accept_kubernetes_units_only() {
        for good in ["1", "100m", "0.5", "128Mi", "2Gi", "1e3", "1.5E-2", "+3k"] {
            assert!(check_quantity(good).is_ok(), "{good}");
        }
        for bad in ["", "m", "1.2.3", "12XB", "1e", "abc", "."] {
            assert!(check_quantity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_and_config_keys_follow_their_own_rules() {
        assert!(check_env_name("MY_VAR.1").is_ok());
        assert!(check_env_name("1VAR").is_err());
        assert!(check_env_name("").is_err());
        assert!(check_config_key("app.properties").is_ok());
        assert!(check_config_key("..").is_err());
        assert!(check_config_key("a/b").is_err());
    }
}
