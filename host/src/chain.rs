//! An error with its causes, on one line, for conditions, Events and logs.
//!
//! An answer of the API server is written once, as a person reads it: its
//! code and reason, then what the server said was wrong (each refused
//! field, or its message), capped. kube's own text for it holds the
//! message three times and a debug dump of the `Status`.

use std::error::Error;
use std::fmt;

use kube::core::Status;

/// The longest text kept of what the API server said.
pub const MAX_SERVER_TEXT: usize = 400;

/// `error: cause: cause's cause`, skipping a cause whose text the previous
/// message already ends with (some libraries repeat their source); an API
/// server's answer ends the chain as [`api_status`] writes it.
#[must_use]
pub fn display_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let (cause_text, last) = match cause.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => (api_status(status), true),
            _ => (cause.to_string(), false),
        };
        if !text.ends_with(&cause_text) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause_text);
        }
        next = if last { None } else { cause.source() };
    }
    text
}

/// An error shown as [`display_chain`] writes it: for log fields
/// (`error = %Chain(&error)`), which would otherwise show kube's text.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&display_chain(self.0))
    }
}

/// An API server's refusal on one line: `422 Invalid: spec.containers[0].name:
/// field is immutable`. The fields the server names with their complaint
/// (the first three, and how many more), else its message, each to its
/// first line (kube-apiserver follows some with a diff of the object); at
/// most [`MAX_SERVER_TEXT`] bytes of it.
#[must_use]
pub fn api_status(status: &Status) -> String {
    let causes: Vec<String> = status
        .details
        .iter()
        .flat_map(|details| &details.causes)
        .filter(|cause| !cause.message.is_empty())
        .map(|cause| match cause.field.as_str() {
            "" => first_line(&cause.message),
            field => format!("{field}: {}", first_line(&cause.message)),
        })
        .collect();
    let said = match causes.len() {
        0 => first_line(&status.message),
        1..=3 => causes.join("; "),
        n => format!("{} (and {} more)", causes[..3].join("; "), n - 3),
    };
    let head = match (status.code, status.reason.as_str()) {
        (0, "") => String::new(),
        (0, reason) => format!("{reason}: "),
        (code, "") => format!("{code}: "),
        (code, reason) => format!("{code} {reason}: "),
    };
    format!("{head}{}", capped(said.trim(), MAX_SERVER_TEXT))
}

/// The first line of `text`, with `…` when more lines follow.
fn first_line(text: &str) -> String {
    match text.trim().split_once('\n') {
        Some((first, _)) => format!("{} …", first.trim_end()),
        None => text.trim().to_owned(),
    }
}

/// `text`, cut at a character boundary to at most `max` bytes, `…` marking a cut.
fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[derive(Debug, thiserror::Error)]
    #[error("repeats: inner")]
    struct Repeats(#[source] Inner);

    #[test]
    fn causes_follow_the_error_separated_by_colons() {
        assert_eq!(display_chain(&Outer(Inner)), "outer: inner");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        assert_eq!(display_chain(&Repeats(Inner)), "repeats: inner");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("Pod hello-1-main: server-side apply failed")]
    struct Apply(#[source] kube::Error);

    fn refusal(message: &str, causes: &[(&str, &str)]) -> kube::Error {
        let status = Status::failure(message, "Invalid").with_code(422);
        let status = if causes.is_empty() {
            status
        } else {
            status.with_details(kube::core::response::StatusDetails {
                causes: causes
                    .iter()
                    .map(|(field, message)| kube::core::response::StatusCause {
                        reason: "FieldValueInvalid".into(),
                        message: (*message).into(),
                        field: (*field).into(),
                    })
                    .collect(),
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                retry_after_seconds: 0,
            })
        };
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn an_api_servers_refusal_is_written_once_with_its_code_and_reason() {
        let message =
            "Pod \"hello-1-main\" is invalid: spec.containers[0].name: field is immutable";
        let text = display_chain(&Apply(refusal(
            message,
            &[("spec.containers[0].name", "field is immutable")],
        )));
        assert_eq!(
            text,
            "Pod hello-1-main: server-side apply failed: 422 Invalid: spec.containers[0].name: field is immutable"
        );
        let text = display_chain(&Apply(refusal(message, &[])));
        assert_eq!(
            text,
            format!("Pod hello-1-main: server-side apply failed: 422 Invalid: {message}")
        );
        assert!(!text.contains("Status {"), "no debug dump: {text}");
    }

    #[test]
    fn a_long_refusal_is_capped_and_many_fields_counted() {
        let long = "x".repeat(5 * MAX_SERVER_TEXT);
        let text = api_status(&Status::failure(&long, "Invalid").with_code(422));
        assert!(
            text.len() <= "422 Invalid: ".len() + MAX_SERVER_TEXT,
            "{}",
            text.len()
        );
        assert!(text.ends_with('…'));
        let Apply(error) = Apply(refusal(
            "",
            &[
                ("a", "bad"),
                ("b", "bad"),
                ("c", "bad"),
                ("d", "bad"),
                ("e", "bad"),
            ],
        ));
        let kube::Error::Api(status) = error else {
            unreachable!()
        };
        assert_eq!(
            api_status(&status),
            "422 Invalid: a: bad; b: bad; c: bad (and 2 more)"
        );
        let diffed = refusal(
            "",
            &[(
                "spec",
                "Forbidden: pod updates may not change fields\n@@ -3,7 +3,7 @@\n-  \"Name\": \"worker\",",
            )],
        );
        let kube::Error::Api(status) = diffed else {
            unreachable!()
        };
        assert_eq!(
            api_status(&status),
            "422 Invalid: spec: Forbidden: pod updates may not change fields …"
        );
        let multibyte = "é".repeat(MAX_SERVER_TEXT);
        assert!(api_status(&Status::failure(&multibyte, "")).ends_with('…'));
    }
}
