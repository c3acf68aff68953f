//! The credentials the host injects for a policy, kept out of what the
//! policy says: every place a policy's words leave the sandbox (its result,
//! the errors naming it, its log lines and output) passes them through the
//! [`Redactor`] of its version, which replaces every value it finds with
//! [`MARKER`].
//!
//! The policy never reads the credential from its own request, but a
//! granted server that reflects request headers (an echo or debug route, an
//! error page quoting the request) hands the value back to it; redaction
//! keeps such a copy out of the DataJob's status, its Events, its
//! children's manifests and the host's log.
//!
//! # What is found
//!
//! Each value, and each secret part of it ([`secret_parts`]): the
//! credentials after an authentication scheme word (`tok3n-s3cret` of
//! `Bearer tok3n-s3cret`), and for `Basic`, the decoded `user:password`,
//! the user and the password, each part of at least [`MIN_PART_BYTES`]
//! bytes (a shorter one would blot out ordinary words; the whole value is
//! always found). Each in the forms a policy that copies what a server sent
//! would carry: its bytes; its form inside a JSON string, as a JSON encoder
//! writes it (`"` and `\` escaped); and, for a value that is not UTF-8, its
//! lossy decoding. Where two values overlap, the leftmost, then the
//! longest, is replaced, and the rest of the other is no longer whole.
//!
//! # Guarantees
//!
//! No text a [`Redactor`] returns contains any of those forms: a text in
//! which one would re-form across a marker is replaced by the marker alone,
//! and a value that is part of the marker itself is refused when the grant
//! is read ([`Redactor::new`]). A policy without credentials has an empty
//! redactor, which returns its text as it is, without a copy.
//!
//! # Caveats
//!
//! A copy the policy encodes (base64, hex, reversed, split over two
//! strings, one character per line) is not the value and is not found, nor
//! is a secret part shorter than [`MIN_PART_BYTES`] on its own, nor a
//! parameter inside the credentials of a scheme other than `Basic` (the
//! credentials after the scheme word are found whole):
//! redaction keeps a reflected credential from leaking by accident, it does
//! not stop a policy that means to leak it. Bind credentials only to origins
//! that do not send them back.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;

/// What a credential is replaced with.
pub const MARKER: &str = "[redacted]";

/// The shortest secret part of a value searched for on its own: shorter
/// ones (a user name such as `admin`) would blot out ordinary words.
pub const MIN_PART_BYTES: usize = 8;

/// Finds a policy's credential values in text and replaces them with
/// [`MARKER`]. Cheap to clone; the empty one costs nothing.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Every form of every value, matched leftmost-longest; `None` without
    /// credentials.
    forms: Option<AhoCorasick>,
    /// The longest form, in bytes.
    longest: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field(
                "forms",
                &self.forms.as_ref().map_or(0, AhoCorasick::patterns_len),
            )
            .finish()
    }
}

/// Why a credential value cannot be redacted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedactError {
    /// The value, one of its secret parts, or one of their forms, occurs
    /// in [`MARKER`]: every marker would show it.
    #[error(
        "its value, or a secret part of it, is too short to redact: it occurs in the marker `{MARKER}`"
    )]
    PartOfMarker,
    /// The values are too many or too long to search for.
    #[error("its values are too long to search for")]
    TooLarge(#[source] aho_corasick::BuildError),
}

impl Redactor {
    /// The redactor of a policy without credentials: it finds nothing.
    #[must_use]
    pub const fn none() -> Self {
        Self {
            forms: None,
            longest: 0,
        }
    }

    /// The redactor of these values and their secret parts; an empty value
    /// has nothing to hide and is skipped.
    ///
    /// # Errors
    ///
    /// [`RedactError::PartOfMarker`] for a value the marker would show
    /// (checked one by one with [`Redactor::check`] first, to name it);
    /// [`RedactError::TooLarge`] past the search's size limits.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, RedactError> {
        let mut forms: Vec<Vec<u8>> = Vec::new();
        for value in values {
            let parts = secret_parts(value);
            let whole = std::iter::once(value.to_vec());
            for form in whole.chain(parts).flat_map(|part| forms_of(&part)) {
                if MARKER.as_bytes().windows(form.len()).any(|w| w == form) {
                    return Err(RedactError::PartOfMarker);
                }
                forms.push(form);
            }
        }
        forms.sort_unstable();
        forms.dedup();
        if forms.is_empty() {
            return Ok(Self::none());
        }
        let longest = forms.iter().map(Vec::len).max().unwrap_or(0);
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&forms)
            .map_err(RedactError::TooLarge)?;
        Ok(Self {
            forms: Some(automaton),
            longest,
        })
    }

    /// Whether `value` can be redacted.
    ///
    /// # Errors
    ///
    /// As [`Redactor::new`] for this one value.
    pub fn check(value: &[u8]) -> Result<(), RedactError> {
        Self::new([value]).map(drop)
    }

    /// Whether it finds nothing (no credentials).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.forms.is_none()
    }

    /// `text` with every value replaced by [`MARKER`]; borrowed when there
    /// is none.
    #[must_use]
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(forms) = &self.forms else {
            return Cow::Borrowed(text);
        };
        let mut found = forms.find_iter(text).peekable();
        if found.peek().is_none() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        // The end of the text already replaced.
        let mut done = 0;
        for found in found {
            // A value that is not UTF-8 may begin or end inside a character
            // of the text: the whole character goes.
            let (mut start, mut end) = (found.start(), found.end());
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            while !text.is_char_boundary(end) {
                end += 1;
            }
            if start >= done {
                out.push_str(&text[done..start]);
                out.push_str(MARKER);
            }
            done = done.max(end);
        }
        out.push_str(&text[done..]);
        if forms.is_match(&out) {
            // A value re-formed across a marker: nothing of the text is safe.
            return Cow::Owned(MARKER.to_owned());
        }
        Cow::Owned(out)
    }

    /// Redacts `text` in place.
    pub fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(redacted) = self.redact(text) {
            *text = redacted;
        }
    }

    /// The first `bytes` of `text` (cut at a character boundary), redacted
    /// as if the whole text had been: a value that begins within them and
    /// ends past them goes too. Reads at most `bytes` plus the longest form.
    #[must_use]
    pub fn redact_prefix<'t>(&self, text: &'t str, bytes: usize) -> Cow<'t, str> {
        let window = prefix(text, bytes.saturating_add(self.longest));
        match self.redact(window) {
            Cow::Borrowed(window) => Cow::Borrowed(prefix(window, bytes)),
            Cow::Owned(redacted) => Cow::Owned(prefix(&redacted, bytes).to_owned()),
        }
    }

    /// Redacts every string of a JSON value, object keys included: the
    /// decoded strings, where an escaped value is whole again.
    pub fn redact_json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(text) => self.redact_string(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_json(item)),
            Value::Object(map) => {
                let keys_clean = map
                    .keys()
                    .all(|key| matches!(self.redact(key), Cow::Borrowed(_)));
                if keys_clean {
                    map.values_mut().for_each(|item| self.redact_json(item));
                } else {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(key, mut item)| {
                            self.redact_json(&mut item);
                            (self.redact(&key).into_owned(), item)
                        })
                        .collect();
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Redacts a JSON text in its decoded strings (re-written only when one
    /// changed); a text that is not JSON is redacted as text.
    pub fn redact_json_text(&self, text: &mut String) {
        let Some(forms) = &self.forms else {
            return;
        };
        // Without an escape, every decoded string is a slice of the text:
        // none of them holds a value the text does not.
        if !text.contains('\\') && !forms.is_match(text.as_str()) {
            return;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(mut value) => {
                let before = value.clone();
                self.redact_json(&mut value);
                if value != before {
                    *text = value.to_string();
                }
            }
            Err(_) => self.redact_string(text),
        }
    }
}

/// The secret parts of a credential value, searched for beside the whole
/// value: a policy that drops the scheme word from a reflected
/// `Authorization` header holds the token alone.
///
/// - `SCHEME CREDENTIALS` (a first word of letters, digits and `-`, then
///   whitespace): the credentials;
/// - `Basic BASE64`: also the decoded `user:password`, the user and the
///   password.
///
/// Parts shorter than [`MIN_PART_BYTES`] are left out.
#[must_use]
pub fn secret_parts(value: &[u8]) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let Some((scheme, credentials)) = scheme_and_credentials(value) else {
        return parts;
    };
    parts.push(credentials.to_vec());
    if scheme.eq_ignore_ascii_case(b"basic") {
        use base64::Engine as _;
        if let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(credentials) {
            if let Some(colon) = decoded.iter().position(|&b| b == b':') {
                parts.push(decoded[..colon].to_vec());
                parts.push(decoded[colon + 1..].to_vec());
            }
            parts.push(decoded);
        }
    }
    parts.retain(|part| part.len() >= MIN_PART_BYTES);
    parts
}

/// `value` as an authentication scheme word and the credentials after it
/// (trimmed), if it has that shape.
fn scheme_and_credentials(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let value = value.trim_ascii();
    let end = value.iter().position(u8::is_ascii_whitespace)?;
    let (scheme, credentials) = value.split_at(end);
    let is_word = scheme
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'-');
    let credentials = credentials.trim_ascii();
    (is_word && !credentials.is_empty()).then_some((scheme, credentials))
}

/// The forms of `value` that are searched for.
fn forms_of(value: &[u8]) -> Vec<Vec<u8>> {
    if value.is_empty() {
        return Vec::new();
    }
    let mut forms = vec![value.to_vec()];
    match std::str::from_utf8(value) {
        Ok(text) => {
            let quoted = Value::String(text.to_owned()).to_string();
            let escaped = &quoted[1..quoted.len() - 1];
            if escaped != text {
                forms.push(escaped.as_bytes().to_vec());
            }
        }
        Err(_) => forms.push(String::from_utf8_lossy(value).into_owned().into_bytes()),
    }
    forms
}

/// The first `bytes` of `text`, cut at a character boundary.
fn prefix(text: &str, bytes: usize) -> &str {
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn redactor(values: &[&str]) -> Redactor {
        Redactor::new(values.iter().map(|v| v.as_bytes())).expect("redactor")
    }

    #[test]
    fn every_occurrence_of_a_value_is_replaced_by_the_marker() {
        let r = redactor(&["Bearer s3cret-token"]);
        assert_eq!(
            r.redact("sent Bearer s3cret-token, got Bearer s3cret-token back"),
            "sent [redacted], got [redacted] back"
        );
        assert_eq!(r.redact("Bearer s3cret-toke"), "Bearer s3cret-toke");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_secret_part_after_a_scheme_word_is_found_alone() {
        let r = redactor(&["Bearer s3cret-token"]);
        assert_eq!(
            r.redact("token=s3cret-token; whole=Bearer s3cret-token"),
            "token=[redacted]; whole=[redacted]"
        );
        let mut outputs = r#"{"seen":"s3cret-token"}"#.to_owned();
        r.redact_json_text(&mut outputs);
        assert_eq!(outputs, r#"{"seen":"[redacted]"}"#);
        // A value without a scheme word is found whole only.
        let r = redactor(&["api-key-0123456789"]);
        assert_eq!(r.redact("0123456789"), "0123456789");
    }

    #[test]
    fn a_basic_value_gives_its_encoding_user_and_password() {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode("deploy-bot:pa55word-x");
        let r = redactor(&[&format!("Basic {encoded}")]);
        assert_eq!(
            r.redact(&format!(
                "{encoded} deploy-bot pa55word-x deploy-bot:pa55word-x"
            )),
            "[redacted] [redacted] [redacted] [redacted]"
        );
        assert_eq!(
            secret_parts(format!("basic  {encoded} ").as_bytes()).len(),
            4,
            "the scheme word in any case"
        );
    }

    #[test]
    fn parts_shorter_than_the_minimum_are_not_searched_alone() {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode("admin:hunter2");
        let value = format!("Basic {encoded}");
        let parts = secret_parts(value.as_bytes());
        assert_eq!(
            parts,
            vec![encoded.as_bytes().to_vec(), b"admin:hunter2".to_vec()]
        );
        let r = redactor(&[&value]);
        assert_eq!(r.redact("the admin said hunter2"), "the admin said hunter2");
        assert_eq!(r.redact("admin:hunter2"), "[redacted]");
        assert!(secret_parts(b"Bearer short").is_empty());
        assert!(secret_parts(b"no-scheme-here").is_empty());
        assert!(secret_parts(b"Bearer ").is_empty());
    }

    #[test]
    fn a_secret_part_the_marker_would_show_is_refused() {
        assert!(matches!(
            Redactor::check(b"Bearer redacted"),
            Err(RedactError::PartOfMarker)
        ));
    }

    #[test]
    fn without_values_the_text_is_returned_as_it_is() {
        for r in [Redactor::none(), redactor(&[]), redactor(&[""])] {
            assert!(r.is_empty());
            assert!(matches!(r.redact("Bearer x"), Cow::Borrowed("Bearer x")));
            let mut value = json!({"a": "b"});
            r.redact_json(&mut value);
            assert_eq!(value, json!({"a": "b"}));
        }
    }

    #[test]
    fn overlapping_values_leave_no_value_whole() {
        // One value inside another: the longer one goes whole.
        let r = redactor(&["token", "Bearer token-1"]);
        assert_eq!(
            r.redact("x Bearer token-1 y token"),
            "x [redacted] y [redacted]"
        );
        // Two values that overlap: the leftmost goes, the other is cut.
        let r = redactor(&["abcdef", "defghi"]);
        assert_eq!(r.redact("abcdefghi"), "[redacted]ghi");
        // A value overlapping itself.
        let r = redactor(&["aaaa"]);
        let out = r.redact("aaaaaaa");
        assert!(!out.contains("aaaa"), "{out}");
    }

    #[test]
    fn a_value_that_would_re_form_across_a_marker_takes_the_whole_text() {
        // `ab` before a marker would show `ab[r` again.
        let r = redactor(&["ab[r", "secret"]);
        assert_eq!(r.redact("x ab[r"), "x [redacted]");
        assert_eq!(r.redact("absecret"), MARKER);
        assert_eq!(r.redact("a secret"), "a [redacted]");
    }

    #[test]
    fn a_value_the_marker_would_show_is_refused() {
        for short in ["d", "red", "[redacted]", "acted]"] {
            assert!(
                matches!(
                    Redactor::check(short.as_bytes()),
                    Err(RedactError::PartOfMarker)
                ),
                "{short}"
            );
        }
        assert!(Redactor::check(b"Bearer long-enough").is_ok());
        assert!(Redactor::check(b"").is_ok());
        assert_eq!(
            RedactError::PartOfMarker.to_string(),
            "its value, or a secret part of it, is too short to redact: it occurs in the marker `[redacted]`"
        );
    }

    #[test]
    fn the_marker_replaces_whole_characters_and_unicode_text_stays_valid() {
        let r = redactor(&["Bearer é-tøken"]);
        assert_eq!(r.redact("ü Bearer é-tøken ü"), "ü [redacted] ü");
        // A value that is not UTF-8 ends inside a character of the text
        // (0xC3 begins `é`): the character goes with it.
        let r = Redactor::new([b"Bearer x\xC3".as_slice()]).expect("redactor");
        assert_eq!(r.redact("Bearer xé!"), "[redacted]!");
        // Its lossy decoding, as a policy that decoded the echo would hold it.
        assert_eq!(r.redact("got Bearer x\u{FFFD}"), "got [redacted]");
    }

    #[test]
    fn a_value_escaped_in_json_is_found_in_the_text_and_in_decoded_strings() {
        let r = redactor(&[r#"Bearer a"b\c/d"#]);
        // As an echo server's JSON body carries it, copied as text.
        assert_eq!(
            r.redact(r#"{"authorization":"Bearer a\"b\\c/d"}"#),
            r#"{"authorization":"[redacted]"}"#
        );
        // In outputs or a manifest: decoded, also with escapes a JSON encoder
        // need not write, and in keys.
        let mut text = r#"{"seen":"Bearer a\u0022b\\c\/d","Bearer a\"b\\c/d":1}"#.to_owned();
        r.redact_json_text(&mut text);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value, json!({"seen": "[redacted]", "[redacted]": 1}));
        // Untouched JSON keeps its text.
        let mut text = r#"{ "b": 1,  "a": "\u0041" }"#.to_owned();
        r.redact_json_text(&mut text);
        assert_eq!(text, r#"{ "b": 1,  "a": "\u0041" }"#);
        // Not JSON: redacted as text.
        let mut text = r#"{"cut": "Bearer a\"b\\c/d"#.to_owned();
        r.redact_json_text(&mut text);
        assert_eq!(text, r#"{"cut": "[redacted]"#);
    }

    #[test]
    fn a_prefix_is_redacted_as_the_whole_text_would_be() {
        let r = redactor(&["Bearer s3cret"]);
        let text = "0123456789Bearer s3cret and more";
        // The cut falls inside the value: none of it is kept.
        assert_eq!(r.redact_prefix(text, 14), "0123456789[red");
        assert_eq!(r.redact_prefix(text, 5), "01234");
        assert_eq!(r.redact_prefix("é", 1), "");
        assert_eq!(Redactor::none().redact_prefix(text, 14), "0123456789Bear");
    }
}
