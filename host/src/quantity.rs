//! The quantities of the host's settings, written as Kubernetes writes them:
//! integers with `_` separators, byte quantities with binary or decimal
//! suffixes, durations with a unit.

use std::time::Duration;

/// A non-negative integer; `_` may separate digit groups.
pub(crate) fn parse_integer(text: &str) -> Option<u64> {
    let digits: String = text.chars().filter(|c| *c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || text.starts_with('_') {
        return None;
    }
    digits.parse().ok()
}

/// A Kubernetes-style byte quantity: an integer with an optional binary
/// (`Ki`, `Mi`, `Gi`, `Ti`) or decimal (`k`, `M`, `G`, `T`) suffix.
pub(crate) fn parse_bytes(text: &str) -> Option<u64> {
    const SUFFIXES: &[(&str, u64)] = &[
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(suffix, factor)| Some((text.strip_suffix(suffix)?, *factor)))
        .unwrap_or((text, 1));
    parse_integer(number)?.checked_mul(factor)
}

/// `500ms`, `2s`, `1m`, `1h`: an integer and a unit, the one grammar of
/// every time the host reads (flags and ConfigMap keys).
#[must_use]
pub fn parse_duration(text: &str) -> Option<Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return parse_integer(ms).map(Duration::from_millis);
    }
    let (number, seconds) = [("s", 1), ("m", 60), ("h", 3600)]
        .into_iter()
        .find_map(|(unit, seconds)| Some((text.strip_suffix(unit)?, seconds)))?;
    parse_integer(number)?
        .checked_mul(seconds)
        .map(Duration::from_secs)
}

/// `d` in that grammar: whole seconds as `2s`, anything else in
/// milliseconds, rounded up.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    format_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// `64Mi` for 67108864: the largest binary suffix that divides it.
pub(crate) fn format_bytes(bytes: u64) -> String {
    for (suffix, shift) in [("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

pub(crate) fn format_millis(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_durations_take_kubernetes_suffixes() {
        assert_eq!(parse_bytes("67108864"), Some(64 << 20));
        assert_eq!(parse_bytes("64Mi"), Some(64 << 20));
        assert_eq!(parse_bytes("2Gi"), Some(2 << 30));
        assert_eq!(parse_bytes("512Ki"), Some(512 << 10));
        assert_eq!(parse_bytes("5k"), Some(5000));
        assert_eq!(parse_bytes("64MB"), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("1.5Gi"), None);
        assert_eq!(parse_bytes("99999999999999999Ti"), None, "overflow");
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("2"), None, "a unit is required");
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("2d"), None);
        assert_eq!(format_duration(Duration::from_secs(120)), "120s");
        assert_eq!(format_duration(Duration::from_micros(1500)), "2ms");
        assert_eq!(parse_integer("1_000"), Some(1000));
        assert_eq!(parse_integer("_1"), None);
        assert_eq!(parse_integer(""), None);
    }
}
