//! Text shown on a terminal: everything the CLI prints, with the characters
//! a terminal would act on escaped and each line capped.
//!
//! Much of what the CLI prints was written by someone else: what a
//! candidate answered and how it faulted (`policy diff`, the replay
//! report), a DataJob's spec and status, a registry's or a cluster's error
//! messages. A terminal obeys the control characters in such text rather
//! than showing them: an escape sequence retitles or recolours it, moves
//! the cursor and rewrites what is already on screen; a bidirectional
//! control reorders what follows it, so the line read is not the line
//! printed ("Trojan Source", CVE-2021-42574). So every character
//! [`is_escaped`] names is shown as an escape a reader sees (`\x1b`,
//! `\u{202e}`), and a line longer than [`LINE_CAP`] characters is cut, the
//! cut saying how much was left out.
//!
//! The CLI prints only through this module, and no file can forget to:
//! its macros take the place of std's (`use super::terminal::{println, …}`),
//! and `cli` denies `clippy::print_stdout` and `clippy::print_stderr`, which
//! flag std's.
//! - `println!` and `eprintln!` print one line: a line break in the text is
//!   shown as `\n`, so no value can forge a line of a report.
//! - `print!` and `eprint!` print text with its own line breaks (a block
//!   the CLI laid out, an error with a backtrace), each line escaped and
//!   capped.
//! - [`print_json`] and [`print_document`] print a document for programs
//!   (`-o json`, `--output yaml`, `crd`): escaped, but never cut, which
//!   would make it unreadable to them.
//!
//! The operator's log ([`super::logging`]) escapes the same characters the
//! same way ([`escaped_but`]).
//!
//! # Caveats
//!
//! A backslash is shown as it is, so a text can spell `\x1b` out itself: it
//! reads as an escape but does nothing.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;

/// The longest line shown, in characters (after escaping): longer ones are
/// cut, ending in `… (N more characters)` within this length.
pub(crate) const LINE_CAP: usize = 1_000;

/// The room kept at the end of a cut line for its mark: the longest mark,
/// the count of a `usize`'s 20 digits, fits.
const MARK_ROOM: usize = 40;

/// Whether a terminal would act on `c` rather than show it: the C0 controls
/// (ESC among them), DEL, the C1 controls (U+009B is a one-character CSI to
/// some terminals) and Unicode's bidirectional controls: the letter marks
/// U+061C, U+200E and U+200F, the embeddings and overrides U+202A–U+202E
/// and the isolates U+2066–U+2069.
pub(crate) fn is_escaped(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1f'
            | '\x7f'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

/// Appends `c` as shown: an escaped character as `\n`, `\r`, `\t`, `\xNN`
/// below U+0080 and `\u{NNNN}` above (Rust's spelling), any other as it is.
fn push_shown(c: char, escapes: bool, out: &mut String) {
    match c {
        _ if !escapes => out.push(c),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_ascii() => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        c => out.extend(c.escape_unicode()),
    }
}

/// `text` as one line: every escaped character shown escaped, a line break
/// too, and capped at [`LINE_CAP`]. Borrowed when nothing changes.
pub(crate) fn line(text: &str) -> Cow<'_, str> {
    shown(text, |_| false, Some(LINE_CAP))
}

/// `text` as lines: its line breaks kept, every other escaped character
/// shown escaped, each line capped at [`LINE_CAP`]. Borrowed when nothing
/// changes.
pub(crate) fn lines(text: &str) -> Cow<'_, str> {
    shown(text, |c| c == '\n', Some(LINE_CAP))
}

/// `text` with every escaped character shown escaped but those `kept`
/// names, and no line capped. A line break kept separates lines. Borrowed
/// when nothing changes.
pub(crate) fn escaped_but(text: &str, kept: impl Fn(char) -> bool) -> Cow<'_, str> {
    shown(text, kept, None)
}

/// A JSON text (serde_json's) with every escaped character it holds raw
/// (DEL, C1, bidirectional) written as JSON's own `\uNNNN`: the value read
/// back is the same, and a terminal shows the escape. Such characters can
/// only be inside strings: serde_json writes nothing else but ASCII.
pub(crate) fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_escaped(c) && c != '\n') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_escaped(c) && c != '\n' {
            // Every escaped character is in the Basic Multilingual Plane.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` with the escaped characters but those `kept` shown escaped, each
/// line (split at `\n` when it is kept) capped at `cap` characters.
fn shown(text: &str, kept: impl Fn(char) -> bool, cap: Option<usize>) -> Cow<'_, str> {
    let escapes = |c: char| is_escaped(c) && !kept(c);
    let breaks = kept('\n');
    let split = || text.split(move |c| breaks && c == '\n');
    let fits = |line: &str| cap.is_none_or(|cap| line.len() <= cap || line.chars().count() <= cap);
    if !text.chars().any(escapes) && split().all(fits) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in split().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match cap {
            Some(cap) => push_capped(line, &escapes, cap, &mut out),
            None => line
                .chars()
                .for_each(|c| push_shown(c, escapes(c), &mut out)),
        }
    }
    Cow::Owned(out)
}

/// Appends `line` as shown; when that is longer than `cap` characters, only
/// what fits before the mark, cut between two characters (never inside an
/// escape or a character's UTF-8), then the mark.
fn push_capped(line: &str, escapes: &impl Fn(char) -> bool, cap: usize, out: &mut String) {
    let keep = cap - MARK_ROOM;
    let mut shown = 0;
    // Where to cut: `out`'s length and the characters of `line` taken.
    let mut cut = (out.len(), 0);
    for (taken, c) in line.chars().enumerate() {
        let before = out.len();
        push_shown(c, escapes(c), out);
        shown += out[before..].chars().count();
        if shown <= keep {
            cut = (out.len(), taken + 1);
        } else if shown > cap {
            out.truncate(cut.0);
            out.push_str(&mark(line.chars().count() - cut.1));
            return;
        }
    }
}

/// The mark ending a cut line.
fn mark(left_out: usize) -> String {
    format!("… ({left_out} more characters)")
}

/// Where the CLI prints.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

impl Stream {
    /// Prints `text` as one line ([`line`]): what `println!` and
    /// `eprintln!` do.
    pub(crate) fn line(self, text: &str) {
        self.write(&[&line(text), "\n"]);
    }

    /// Prints `text` as lines ([`lines`]): what `print!` and `eprint!` do.
    pub(crate) fn lines(self, text: &str) {
        self.write(&[&lines(text)]);
    }

    /// Writes `parts` at once, or panics as std's `print!` does.
    fn write(self, parts: &[&str]) {
        let (written, name) = match self {
            Self::Out => (write_all(io::stdout().lock(), parts), "stdout"),
            Self::Err => (write_all(io::stderr().lock(), parts), "stderr"),
        };
        if let Err(error) = written {
            panic!("failed printing to {name}: {error}");
        }
    }
}

fn write_all(mut to: impl io::Write, parts: &[&str]) -> io::Result<()> {
    parts
        .iter()
        .try_for_each(|part| to.write_all(part.as_bytes()))?;
    to.flush()
}

/// Prints `value` on stdout as pretty JSON and a line break, every escaped
/// character in JSON's own escape ([`json`]).
pub(crate) fn print_json(value: &impl serde::Serialize) -> serde_json::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    Stream::Out.write(&[&json(&text), "\n"]);
    Ok(())
}

/// Prints a document (YAML) on stdout, its line breaks kept, every other
/// escaped character shown escaped, no line cut. Its own syntax quotes most
/// such characters already (serde-saphyr double-quotes a string holding a
/// control); a bidirectional control it leaves is shown as `\u{202e}`, which
/// a YAML reader takes as text.
pub(crate) fn print_document(text: &str) {
    Stream::Out.write(&[&escaped_but(text, |c| c == '\n')]);
}

/// std's `println!` for the CLI: one line on stdout, [`line`] shown.
macro_rules! println {
    () => {
        $crate::cli::terminal::Stream::Out.line("")
    };
    ($($arg:tt)*) => {
        $crate::cli::terminal::Stream::Out.line(&::std::format!($($arg)*))
    };
}

/// std's `eprintln!` for the CLI: one line on stderr, [`line`] shown.
macro_rules! eprintln {
    () => {
        $crate::cli::terminal::Stream::Err.line("")
    };
    ($($arg:tt)*) => {
        $crate::cli::terminal::Stream::Err.line(&::std::format!($($arg)*))
    };
}

/// std's `print!` for the CLI: text on stdout, its line breaks kept,
/// [`lines`] shown.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::cli::terminal::Stream::Out.lines(&::std::format!($($arg)*))
    };
}

/// std's `eprint!` for the CLI: text on stderr, its line breaks kept,
/// [`lines`] shown.
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::cli::terminal::Stream::Err.lines(&::std::format!($($arg)*))
    };
}

pub(crate) use {eprint, eprintln, print, println};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bidirectional control.
    const BIDI: [char; 12] = [
        '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
        '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
    ];

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for text in ["", "plain", "naïve 字 ✓ \\x1b", "two\nlines"] {
            assert!(
                matches!(lines(text), Cow::Borrowed(t) if t == text),
                "{text:?}"
            );
        }
        assert!(matches!(line("a line"), Cow::Borrowed("a line")));
        assert!(matches!(json("{\n  \"a\": \"b\"\n}"), Cow::Borrowed(_)));
    }

    #[test]
    fn an_escape_sequence_is_shown_not_obeyed() {
        assert_eq!(
            line("\x1b]0;owned\x07\x1b[2J\x1b[31mred"),
            r"\x1b]0;owned\x07\x1b[2J\x1b[31mred"
        );
    }

    #[test]
    fn each_c0_control_and_del_is_escaped_tab_and_returns_by_name() {
        for c in ('\0'..='\x1f').chain(['\x7f']) {
            let expected = match c {
                '\n' => r"\n".to_owned(),
                '\r' => r"\r".to_owned(),
                '\t' => r"\t".to_owned(),
                c => format!("\\x{:02x}", u32::from(c)),
            };
            assert_eq!(line(&format!("a{c}b")), format!("a{expected}b"), "{c:?}");
        }
    }

    #[test]
    fn each_c1_control_is_escaped() {
        for c in '\u{80}'..='\u{9f}' {
            assert_eq!(
                line(&format!("a{c}b")),
                format!("a\\u{{{:x}}}b", u32::from(c))
            );
        }
        assert_eq!(line("\u{9b}31m"), r"\u{9b}31m");
        assert_eq!(line("\u{a0}é"), "\u{a0}é", "U+00A0 on are text");
    }

    #[test]
    fn each_bidirectional_control_is_escaped() {
        for c in BIDI {
            let shown = format!("\\u{{{:x}}}", u32::from(c));
            assert_eq!(line(&format!("a{c}b")), format!("a{shown}b"));
            assert_eq!(lines(&format!("a{c}b")), format!("a{shown}b"));
        }
        assert_eq!(line("admin\u{202e}txt.exe"), r"admin\u{202e}txt.exe");
        assert!(!is_escaped('\u{200d}'), "a joiner draws emoji: text");
    }

    #[test]
    fn a_line_break_is_escaped_in_a_line_and_kept_between_lines() {
        assert_eq!(line("ok\nFAULT forged\r\n"), r"ok\nFAULT forged\r\n");
        assert_eq!(
            lines("first\x1b[A\nsecond\r\n"),
            "first\\x1b[A\nsecond\\r\n"
        );
    }

    #[test]
    fn a_long_line_is_cut_within_the_cap_saying_how_much_was_left_out() {
        let long = "x".repeat(5_000);
        let shown = line(&long);
        assert_eq!(
            shown.chars().count(),
            LINE_CAP - MARK_ROOM + mark(4_040).chars().count()
        );
        assert!(shown.starts_with(&"x".repeat(LINE_CAP - MARK_ROOM)));
        assert!(shown.ends_with("x… (4040 more characters)"), "{shown}");
        let exactly = "y".repeat(LINE_CAP);
        assert!(matches!(line(&exactly), Cow::Borrowed(_)));
        assert!(mark(usize::MAX).chars().count() <= MARK_ROOM);
    }

    #[test]
    fn each_line_of_a_text_is_capped_on_its_own() {
        let text = format!("short\n{}\nshort", "z".repeat(LINE_CAP + 1));
        let shown = lines(&text);
        let shown: Vec<&str> = shown.split('\n').collect();
        assert_eq!(shown.len(), 3);
        assert_eq!((shown[0], shown[2]), ("short", "short"));
        assert!(
            shown[1].ends_with("z… (41 more characters)"),
            "{}",
            shown[1]
        );
    }

    #[test]
    fn a_cut_never_splits_a_character_or_an_escape() {
        let wide = "é".repeat(3_000);
        let shown = line(&wide);
        assert!(shown.starts_with(&"é".repeat(LINE_CAP - MARK_ROOM)));
        assert!(shown.ends_with("é… (2040 more characters)"), "{shown}");
        let overrides = "\u{202e}".repeat(500);
        let shown = line(&overrides);
        let kept = (LINE_CAP - MARK_ROOM) / r"\u{202e}".len();
        assert_eq!(
            shown,
            format!("{}{}", r"\u{202e}".repeat(kept), mark(500 - kept))
        );
    }

    #[test]
    fn showing_what_was_shown_changes_nothing() {
        let hostile = format!(
            "a\x1b[2J\u{9b}\u{202e}\n{}\tz\n{}",
            "é".repeat(2_000),
            "\u{2066}".repeat(300)
        );
        for shown in [line(&hostile), lines(&hostile)] {
            assert!(shown.chars().all(|c| c == '\n' || !is_escaped(c)));
            assert!(matches!(lines(&shown), Cow::Borrowed(_)));
        }
    }

    #[test]
    fn escaped_but_keeps_what_it_is_told_and_cuts_nothing() {
        let long = format!("\x1b[1m{}\x1b[0m\u{202e}\n", "w".repeat(2 * LINE_CAP));
        let shown = escaped_but(&long, |c| c == '\x1b');
        assert_eq!(
            shown,
            format!("\x1b[1m{}\x1b[0m\\u{{202e}}\\n", "w".repeat(2 * LINE_CAP))
        );
    }

    #[test]
    fn json_escapes_in_its_own_syntax_and_reads_back_the_same() {
        let value = serde_json::json!({
            "message": "\x1b[31m\u{7f}\u{9b}\u{202e}\u{2069}\nend",
            "naïve": "字",
        });
        let text = serde_json::to_string_pretty(&value).unwrap();
        let shown = json(&text);
        assert!(shown.chars().all(|c| c == '\n' || !is_escaped(c)));
        assert!(
            shown.contains(r#""\u001b[31m\u007f\u009b\u202e\u2069\nend""#),
            "{shown}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&shown).unwrap(),
            value
        );
        assert!(shown.lines().count() > 1, "pretty JSON keeps its lines");
    }
}
