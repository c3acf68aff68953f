//! An error with its causes, on one line, for conditions, Events and logs.

use std::error::Error;

/// `error: cause: cause's cause`, skipping a cause whose text the previous
/// message already ends with (some libraries repeat their source).
#[must_use]
pub fn display_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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
}
