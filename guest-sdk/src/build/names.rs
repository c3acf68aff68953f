//! Kubernetes name and label validation for the builders: the rules are
//! `policyhost_names`' (shared with the host and devcluster), worded as
//! this SDK's [`Error`].

use policyhost_names::Verdict;

use super::kinds::Kind;
use super::{Error, Result};

/// A DNS-1123 label: at most 63 lower-case alphanumerics or `-`, starting
/// and ending with an alphanumeric (container names, Service ports, Jobs).
#[must_use]
pub fn is_dns1123_label(name: &str) -> bool {
    policyhost_names::dns1123_label(name).is_ok()
}

/// A DNS-1123 subdomain: at most 253 characters of dot-separated DNS-1123
/// labels (Pod, ConfigMap names).
#[must_use]
pub fn is_dns1123_subdomain(name: &str) -> bool {
    policyhost_names::dns1123_subdomain(name).is_ok()
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter (Service names).
#[must_use]
pub fn is_dns1035_label(name: &str) -> bool {
    policyhost_names::dns1035_label(name).is_ok()
}

/// `rule`'s verdict on `value`, as the builder's error naming `what`.
fn checked(what: &'static str, value: &str, rule: fn(&str) -> Verdict) -> Result<()> {
    rule(value).map_err(|violation| Error::Invalid {
        what,
        value: value.to_owned(),
        reason: violation.reason(),
    })
}

pub(super) fn check_label(what: &'static str, name: &str) -> Result<()> {
    checked(what, name, policyhost_names::dns1123_label)
}

pub(super) fn check_subdomain(what: &'static str, name: &str) -> Result<()> {
    checked(what, name, policyhost_names::dns1123_subdomain)
}

/// The name of an object of `kind`, by the rule of its kind.
pub(super) fn check_name(kind: &Kind, name: &str) -> Result<()> {
    checked(kind.name_what, name, kind.name_rule)
}

/// A label or annotation key.
pub(super) fn check_key(what: &'static str, key: &str) -> Result<()> {
    checked(what, key, policyhost_names::label_key)
}

/// A label value.
pub(super) fn check_label_value(value: &str) -> Result<()> {
    checked("label value", value, policyhost_names::label_value)
}

/// An environment variable name.
pub(super) fn check_env_name(name: &str) -> Result<()> {
    checked(
        "environment variable name",
        name,
        policyhost_names::env_var_name,
    )
}

/// A ConfigMap key.
pub(super) fn check_config_key(key: &str) -> Result<()> {
    checked("ConfigMap key", key, policyhost_names::config_map_key)
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
        Err(Error::Invalid {
            what: "resource quantity",
            value: value.to_owned(),
            reason: "must be a number with an optional unit such as m, Mi or Gi",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_rules_answer_the_public_predicates() {
        assert!(is_dns1123_label("worker-0"));
        assert!(!is_dns1123_label("a.b"));
        assert!(is_dns1123_subdomain("a.b"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_dns1035_label("svc-1"));
        assert!(!is_dns1035_label("1svc"));
    }

    #[test]
    fn a_broken_rule_is_an_error_naming_the_field_the_value_and_the_rule() {
        let error = check_key("label key", "Bad_Prefix/x").unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"label key "Bad_Prefix/x" is invalid: must consist of lower-case letters, digits, '-' and '.'"#
        );
        assert!(check_key("label key", "policyhost.dev/datajob").is_ok());
        assert!(matches!(
            check_label_value(&"v".repeat(64)),
            Err(Error::Invalid {
                what: "label value",
                ..
            })
        ));
        assert!(check_env_name("1VAR").is_err());
        assert!(check_config_key("..").is_err());
        assert!(check_name(&crate::build::kinds::SERVICE, "1svc").is_err());
        assert!(check_subdomain("Pod name", "ok.name").is_ok());
        assert!(check_label("Job name", "a.b").is_err());
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
}
