//! The output rules of a result's status and Events: what one result may
//! ask the host to write on its DataJob.
//!
//! Each cap is either a rule (the whole result is invalid output, nothing is
//! applied, and the author reads which rule in the `Ready=False` condition)
//! or a cut (the text is shortened and the result goes through):
//!
//! | what | cap | broken |
//! |---|---|---|
//! | policy conditions | [`MAX_CONDITIONS`] | rule: a list others iterate; dropping some would hide state |
//! | condition `type` | Kubernetes' syntax, [`MAX_CONDITION_TYPE`] characters | rule: programs match on it |
//! | condition and Event `reason` | one word `[A-Za-z][A-Za-z0-9_,:]*`, [`MAX_REASON`] characters | rule: programs match on it, and a newline in it would forge lines in `kubectl` output |
//! | `phase` | one word `[A-Za-z][A-Za-z0-9]*`, [`MAX_PHASE`] characters | rule: a printer column, compared by scripts; a cut phase would be a different one |
//! | `outputs` nesting | [`MAX_OUTPUTS_DEPTH`] levels | rule: a tree cut anywhere means something else |
//! | status `message`, condition `message` | [`MAX_MESSAGE`] bytes | cut: prose for people, marked with `…` |
//!
//! Event messages are cut at the Events API's 1,024 bytes when recorded,
//! and the number of Events is capped there too (they are dropped and
//! counted, not refused: `apply::events`).
//!
//! Why the depth: the operator reads its DataJobs back through kube-rs,
//! whose JSON parser (serde_json) refuses documents nested deeper than 128
//! levels, and a DataJob in a list or a watch event sits four or five
//! levels down. A status nested too deep for that would make the whole list
//! unreadable after a restart: no DataJob of any team would be reconciled.
//! 32 levels leave room for everything the host wraps around `outputs`.

use super::super::bindings::{Condition, Event, Status};
use super::super::error::{Error, Result};

/// Conditions one result may report (the host's own come on top).
pub const MAX_CONDITIONS: usize = 16;
/// The longest condition type: a 253-character prefix, `/`, a 62-character name
/// (as `metav1.Condition` allows).
pub const MAX_CONDITION_TYPE: usize = 316;
/// The longest name part of a condition type (after the prefix).
const MAX_TYPE_NAME: usize = 63;
/// The longest reason of a condition or an Event (the Events API's limit).
pub const MAX_REASON: usize = 128;
/// The longest phase (a DNS label's length).
pub const MAX_PHASE: usize = 63;
/// The longest status or condition message, in bytes; longer ones are cut.
pub const MAX_MESSAGE: usize = 1024;
/// The deepest nesting of `status.outputs`, the object itself being level 1.
pub const MAX_OUTPUTS_DEPTH: usize = 32;

/// Checks a result's status against the rules and cuts its messages.
pub(in crate::runtime) fn check(mut status: Status) -> Result<Status> {
    if !is_word(&status.phase, MAX_PHASE, |b| b.is_ascii_alphanumeric()) {
        return Err(Error::invalid_output(
            "status.phase",
            format!(
                "{:?} is not one word of at most {MAX_PHASE} letters and digits starting with a letter (e.g. `Running`)",
                shown(&status.phase)
            ),
        ));
    }
    if status.conditions.len() > MAX_CONDITIONS {
        return Err(Error::invalid_output(
            "status.conditions",
            format!(
                "{} conditions, at most {MAX_CONDITIONS} are allowed",
                status.conditions.len()
            ),
        ));
    }
    for (index, condition) in status.conditions.iter_mut().enumerate() {
        check_condition(index, condition)?;
    }
    if let Some(depth) = deeper_than(&status.outputs, MAX_OUTPUTS_DEPTH) {
        return Err(Error::invalid_output(
            "status.outputs",
            format!(
                "is nested {depth} levels deep or more, at most {MAX_OUTPUTS_DEPTH} are allowed (the operator must read it back)"
            ),
        ));
    }
    truncate(&mut status.message, MAX_MESSAGE);
    Ok(status)
}

/// Checks the reasons of a result's Events.
pub(in crate::runtime) fn check_events(events: &[Event]) -> Result<()> {
    for (index, event) in events.iter().enumerate() {
        if !is_reason(&event.reason) {
            return Err(Error::invalid_output(
                format!("events[{index}]"),
                reason_rule(&event.reason),
            ));
        }
    }
    Ok(())
}

fn check_condition(index: usize, condition: &mut Condition) -> Result<()> {
    let at = || format!("status.conditions[{index}]");
    if !is_condition_type(&condition.kind) {
        return Err(Error::invalid_output(
            at(),
            format!(
                "type {:?} is not a condition type (an optional DNS subdomain and `/`, then letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit; at most {MAX_CONDITION_TYPE} characters)",
                shown(&condition.kind)
            ),
        ));
    }
    if !is_reason(&condition.reason) {
        return Err(Error::invalid_output(at(), reason_rule(&condition.reason)));
    }
    truncate(&mut condition.message, MAX_MESSAGE);
    Ok(())
}

fn reason_rule(reason: &str) -> String {
    format!(
        "reason {:?} is not one word of at most {MAX_REASON} characters: a letter, then letters, digits, `_`, `,` or `:` (e.g. `AllRunning`)",
        shown(reason)
    )
}

/// A reason as Kubernetes' `metav1.Condition` defines it:
/// `[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`.
fn is_reason(reason: &str) -> bool {
    is_word(reason, MAX_REASON, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':')
    }) && !reason.ends_with([',', ':'])
}

/// Non-empty, at most `max` bytes, an ASCII letter first and `rest` after.
fn is_word(text: &str, max: usize, rest: impl Fn(u8) -> bool) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= max
        && bytes[0].is_ascii_alphabetic()
        && bytes[1..].iter().all(|&b| rest(b))
}

/// A condition type as Kubernetes' `metav1.Condition` defines it: an
/// optional DNS-1123 subdomain prefix and `/`, then a qualified name.
fn is_condition_type(kind: &str) -> bool {
    if kind.len() > MAX_CONDITION_TYPE {
        return false;
    }
    let (prefix, name) = kind
        .rsplit_once('/')
        .map_or((None, kind), |(p, n)| (Some(p), n));
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    let bytes = name.as_bytes();
    let name_ok = !bytes.is_empty()
        && bytes.len() <= MAX_TYPE_NAME
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'));
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

fn is_dns_subdomain(text: &str) -> bool {
    let lower = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes.first().is_some_and(lower)
                && bytes.last().is_some_and(lower)
                && bytes.iter().all(|b| lower(b) || *b == b'-')
        })
}

/// `Some(max + 1)` when the JSON text nests objects and arrays deeper than
/// `max` levels. One pass over the bytes, strings skipped, nothing parsed:
/// it runs before `serde_json`, whose own limit (128) would otherwise be
/// the one to answer, with a less useful message.
fn deeper_than(json: &str, max: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in json.as_bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Some(depth);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Cuts `text` to at most `max` bytes at a character boundary, ending with
/// `…` when it cut.
pub(crate) fn truncate(text: &mut String, max: usize) {
    const MARK: &str = "…";
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
}

/// At most 64 bytes of `text`, for a message about it.
fn shown(text: &str) -> String {
    let mut shown = text.to_owned();
    truncate(&mut shown, 64);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Status {
        Status {
            phase: "Running".into(),
            message: "ok".into(),
            conditions: vec![condition("WorkersReady", "AllRunning")],
            outputs: r#"{"running":1}"#.into(),
        }
    }

    fn condition(kind: &str, reason: &str) -> Condition {
        Condition {
            kind: kind.into(),
            status: true,
            reason: reason.into(),
            message: "m".into(),
        }
    }

    fn rule(result: Result<Status>) -> (String, String) {
        match result {
            Err(Error::InvalidOutput { location, rule }) => (location, rule),
            other => panic!("expected InvalidOutput, got {other:?}"),
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
    }

    #[test]
    fn a_plain_status_passes_unchanged() {
        assert_eq!(check(status()).unwrap(), status());
    }

    #[test]
    fn phases_are_one_short_word() {
        for good in ["Running", "Pending", "Phase2", "a"] {
            let mut s = status();
            s.phase = good.into();
            assert!(check(s).is_ok(), "{good:?} refused");
        }
        for bad in [
            "",
            "2Fast",
            "Running\nReady",
            "Run ning",
            "Zürich",
            &"P".repeat(64),
        ] {
            let mut s = status();
            s.phase = bad.into();
            let (location, rule) = rule(check(s));
            assert_eq!(location, "status.phase");
            assert!(rule.contains("one word of at most 63"), "{rule}");
        }
    }

    #[test]
    fn more_than_sixteen_conditions_are_invalid_output() {
        let mut s = status();
        s.conditions = (0..17).map(|i| condition(&format!("C{i}"), "R")).collect();
        let (location, rule) = rule(check(s.clone()));
        assert_eq!(location, "status.conditions");
        assert_eq!(rule, "17 conditions, at most 16 are allowed");
        s.conditions.pop();
        assert!(check(s).is_ok());
    }

    #[test]
    fn condition_types_follow_the_kubernetes_syntax() {
        for good in ["Ready", "example.com/Ready", "a.b-c_d", "x/Y2"] {
            assert!(is_condition_type(good), "{good:?} refused");
        }
        let long_name = "A".repeat(64);
        for bad in [
            "",
            "-Ready",
            "Ready-",
            "Bad Type",
            "UPPER.com/Ready",
            "/Ready",
            "a//b",
            &long_name,
        ] {
            assert!(!is_condition_type(bad), "{bad:?} accepted");
        }
        let mut s = status();
        s.conditions = vec![condition("Bad Type", "R")];
        let (location, rule) = rule(check(s));
        assert_eq!(location, "status.conditions[0]");
        assert!(
            rule.starts_with("type \"Bad Type\" is not a condition type"),
            "{rule}"
        );
    }

    #[test]
    fn reasons_are_one_word_without_control_characters() {
        for good in ["AllRunning", "a", "Back_Off", "A,B:C"] {
            assert!(is_reason(good), "{good:?} refused");
        }
        for bad in [
            "",
            "1st",
            "Two words",
            "Line\nBreak",
            "Trailing:",
            "Tab\t",
            &"R".repeat(129),
        ] {
            assert!(!is_reason(bad), "{bad:?} accepted");
        }
        let mut s = status();
        s.conditions = vec![condition("Ready2", "not ok")];
        let (_, rule) = rule(check(s));
        assert!(
            rule.starts_with("reason \"not ok\" is not one word"),
            "{rule}"
        );
        let events = [
            Event {
                warning: false,
                reason: "Fine".into(),
                message: String::new(),
            },
            Event {
                warning: true,
                reason: "Forged\nWarning".into(),
                message: String::new(),
            },
        ];
        match check_events(&events) {
            Err(Error::InvalidOutput { location, .. }) => assert_eq!(location, "events[1]"),
            other => panic!("expected InvalidOutput, got {other:?}"),
        }
    }

    #[test]
    fn outputs_nested_deeper_than_the_operator_can_read_back_are_invalid_output() {
        let mut s = status();
        s.outputs = nested(MAX_OUTPUTS_DEPTH);
        assert!(check(s.clone()).is_ok(), "32 levels pass");
        s.outputs = nested(MAX_OUTPUTS_DEPTH + 1);
        let (location, rule) = rule(check(s.clone()));
        assert_eq!(location, "status.outputs");
        assert!(
            rule.contains("nested 33 levels deep or more, at most 32"),
            "{rule}"
        );
        // What serde_json could still parse, but not inside a list of DataJobs.
        s.outputs = nested(125);
        assert!(check(s).is_err());
    }

    #[test]
    fn brackets_inside_strings_do_not_count_as_nesting() {
        let text = format!(r#"{{"a":"{}","b":"\"{{"}}"#, "[".repeat(100));
        assert_eq!(deeper_than(&text, 1), None);
        assert_eq!(deeper_than(r#"[[["x"]]]"#, 2), Some(3));
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary_and_marked() {
        let mut s = status();
        s.message = "é".repeat(1000);
        s.conditions[0].message = "x".repeat(5000);
        let checked = check(s).unwrap();
        assert!(checked.message.len() <= MAX_MESSAGE);
        assert!(checked.message.ends_with('…'));
        assert_eq!(checked.conditions[0].message.len(), MAX_MESSAGE);
        let mut short = "abc".to_owned();
        truncate(&mut short, 3);
        assert_eq!(short, "abc");
        let mut cut = "abcdef".to_owned();
        truncate(&mut cut, 4);
        assert_eq!(cut, "a…");
    }
}
