//! Go's `time.Parse` of the layouts `metav1.Time` and `metav1.MicroTime`
//! read, and its errors: kube-apiserver answers a malformed timestamp with
//! Go's `ParseError` text.
//!
//! Only what these two layouts need of Go's parser is here, step for step
//! (so that what Go accepts, such as a one-digit hour, is accepted too).

use std::fmt;

/// The layout of a Kubernetes time type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `metav1.Time`: `time.RFC3339`.
    Rfc3339,
    /// `metav1.MicroTime`: RFC 3339 with exactly six fractional digits.
    Rfc3339Micro,
}

/// One element of a layout and the literal text before it.
struct Chunk {
    prefix: &'static str,
    element: Element,
    /// The element as the layout spells it, for messages.
    text: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Element {
    LongYear,
    ZeroMonth,
    ZeroDay,
    Hour,
    ZeroMinute,
    ZeroSecond,
    /// `.000000`: exactly six digits.
    Micros,
    /// `Z07:00`.
    ColonZone,
}

const fn chunk(prefix: &'static str, element: Element, text: &'static str) -> Chunk {
    Chunk {
        prefix,
        element,
        text,
    }
}

const RFC3339: &[Chunk] = &[
    chunk("", Element::LongYear, "2006"),
    chunk("-", Element::ZeroMonth, "01"),
    chunk("-", Element::ZeroDay, "02"),
    chunk("T", Element::Hour, "15"),
    chunk(":", Element::ZeroMinute, "04"),
    chunk(":", Element::ZeroSecond, "05"),
    chunk("", Element::ColonZone, "Z07:00"),
];

const RFC3339_MICRO: &[Chunk] = &[
    chunk("", Element::LongYear, "2006"),
    chunk("-", Element::ZeroMonth, "01"),
    chunk("-", Element::ZeroDay, "02"),
    chunk("T", Element::Hour, "15"),
    chunk(":", Element::ZeroMinute, "04"),
    chunk(":", Element::ZeroSecond, "05"),
    chunk("", Element::Micros, ".000000"),
    chunk("", Element::ColonZone, "Z07:00"),
];

impl Layout {
    /// The layout as Go spells it.
    fn text(self) -> &'static str {
        match self {
            Self::Rfc3339 => "2006-01-02T15:04:05Z07:00",
            Self::Rfc3339Micro => "2006-01-02T15:04:05.000000Z07:00",
        }
    }

    fn chunks(self) -> &'static [Chunk] {
        match self {
            Self::Rfc3339 => RFC3339,
            Self::Rfc3339Micro => RFC3339_MICRO,
        }
    }

    /// The Go type that reads this layout.
    pub(crate) fn go_type(self) -> &'static str {
        match self {
            Self::Rfc3339 => "v1.Time",
            Self::Rfc3339Micro => "v1.MicroTime",
        }
    }
}

/// Go's `time.ParseError`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) struct ParseError {
    layout: Layout,
    value: String,
    problem: Problem,
}

/// What Go's parser found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Problem {
    /// The text from `rest` on does not read as the layout element.
    CannotParse {
        rest: Vec<u8>,
        element: &'static str,
    },
    /// A month, day, hour, ... out of its range.
    OutOfRange(&'static str),
    /// Text after the whole layout.
    ExtraText(Vec<u8>),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = quote(self.value.as_bytes());
        match &self.problem {
            Problem::CannotParse { rest, element } => write!(
                f,
                "parsing time {value} as {}: cannot parse {} as {}",
                quote(self.layout.text().as_bytes()),
                quote(rest),
                quote(element.as_bytes())
            ),
            Problem::OutOfRange(what) => write!(f, "parsing time {value}: {what} out of range"),
            Problem::ExtraText(rest) => {
                write!(f, "parsing time {value}: extra text: {}", quote(rest))
            }
        }
    }
}

/// The `time` package's own quoting: non-ASCII and control bytes as `\x..`.
fn quote(bytes: &[u8]) -> String {
    let mut out = String::from('"');
    for &byte in bytes {
        match byte {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(byte));
            }
            0x20..0x80 => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push('"');
    out
}

fn is_digit(text: &[u8], at: usize) -> bool {
    text.get(at).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (two when `fixed`).
fn getnum(text: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    if !is_digit(text, 0) {
        return None;
    }
    let first = i64::from(text[0] - b'0');
    if !is_digit(text, 1) {
        return (!fixed).then_some((first, &text[1..]));
    }
    Some((first * 10 + i64::from(text[1] - b'0'), &text[2..]))
}

/// Go's `atoi`: an optional sign and digits, nothing else.
fn atoi(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        value = value
            .checked_mul(10)?
            .checked_add(i64::from(digit - b'0'))?;
    }
    Some(if negative { -value } else { value })
}

/// Go's `parseNanoseconds` of `text[..len]`: a `.` or `,` and digits; an
/// `Err` names a range (`fractional second`), `Ok(false)` is unreadable.
fn fraction(text: &[u8], len: usize) -> Result<bool, &'static str> {
    if !matches!(text.first(), Some(b'.' | b',')) {
        return Ok(false);
    }
    match atoi(&text[1..len.min(10)]) {
        None => Ok(false),
        Some(nanos) if nanos < 0 => Err("fractional second"),
        Some(_) => Ok(true),
    }
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `value` as Go's `time.Parse(layout, value)` does, for its error.
pub(crate) fn parse(layout: Layout, value: &str) -> Result<(), ParseError> {
    let fail = |problem| ParseError {
        layout,
        value: value.to_owned(),
        problem,
    };
    let cannot = |rest: &[u8], element| {
        fail(Problem::CannotParse {
            rest: rest.to_vec(),
            element,
        })
    };
    let (mut year, mut month, mut day) = (0, 1, 1);
    let chunks = layout.chunks();
    let mut rest = value.as_bytes();
    for (index, chunk) in chunks.iter().enumerate() {
        // Every prefix of these layouts is one byte.
        rest = rest
            .strip_prefix(chunk.prefix.as_bytes())
            .ok_or_else(|| cannot(rest, chunk.prefix))?;
        let hold = rest;
        let mut range = None;
        let read = match chunk.element {
            Element::LongYear => {
                let parsed = (rest.len() >= 4 && is_digit(rest, 0))
                    .then(|| atoi(&rest[..4]))
                    .flatten();
                parsed.map(|y| {
                    year = y;
                    &rest[4..]
                })
            }
            Element::ZeroMonth => getnum(rest, true).map(|(m, after)| {
                month = m;
                if !(1..=12).contains(&m) {
                    range = Some("month");
                }
                after
            }),
            Element::ZeroDay => getnum(rest, true).map(|(d, after)| {
                day = d;
                after
            }),
            Element::Hour => getnum(rest, false).map(|(hour, after)| {
                if hour >= 24 {
                    range = Some("hour");
                }
                after
            }),
            Element::ZeroMinute => getnum(rest, true).map(|(minute, after)| {
                if minute >= 60 {
                    range = Some("minute");
                }
                after
            }),
            Element::ZeroSecond => getnum(rest, true).map(|(second, after)| {
                if second >= 60 {
                    range = Some("second");
                    return after;
                }
                let next_is_fraction = chunks
                    .get(index + 1)
                    .is_some_and(|c| c.element == Element::Micros);
                // A fraction the layout does not name is read anyway.
                if after.len() >= 2
                    && matches!(after[0], b'.' | b',')
                    && is_digit(after, 1)
                    && !next_is_fraction
                {
                    let mut len = 2;
                    while is_digit(after, len) {
                        len += 1;
                    }
                    return &after[len..];
                }
                after
            }),
            Element::Micros => {
                const LEN: usize = 7;
                if rest.len() < LEN {
                    None
                } else {
                    match fraction(rest, LEN) {
                        Err(what) => {
                            range = Some(what);
                            Some(&rest[LEN..])
                        }
                        Ok(read) => read.then(|| &rest[LEN..]),
                    }
                }
            }
            Element::ColonZone => zone(rest, &mut range),
        };
        if let Some(what) = range {
            return Err(fail(Problem::OutOfRange(what)));
        }
        rest = read.ok_or_else(|| cannot(hold, chunk.text))?;
    }
    if !rest.is_empty() {
        return Err(fail(Problem::ExtraText(rest.to_vec())));
    }
    if day < 1 || day > days_in(month, year) {
        return Err(fail(Problem::OutOfRange("day")));
    }
    Ok(())
}

/// `Z07:00`: `Z`, or a sign and `hh:mm`.
fn zone<'a>(text: &'a [u8], range: &mut Option<&'static str>) -> Option<&'a [u8]> {
    if let Some(after) = text.strip_prefix(b"Z") {
        return Some(after);
    }
    if text.len() < 6 || text[3] != b':' {
        return None;
    }
    let hours = getnum(&text[1..3], true);
    let minutes = hours.and_then(|_| getnum(&text[4..6], true));
    let (hour, minute) = (hours.map_or(0, |h| h.0), minutes.map_or(0, |m| m.0));
    if hour > 24 {
        *range = Some("time zone offset hour");
    }
    if minute > 60 {
        *range = Some("time zone offset minute");
    }
    let signed = matches!(text[0], b'+' | b'-');
    (minutes.is_some() && signed).then(|| &text[6..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(layout: Layout, value: &str) -> Option<String> {
        parse(layout, value).err().map(|e| e.to_string())
    }

    #[test]
    fn rfc3339_errors_are_go_s() {
        // The expectations are Go 1.26's time.Parse(time.RFC3339, value).
        let cases = [
            (
                "garbage",
                Some(
                    "parsing time \"garbage\" as \"2006-01-02T15:04:05Z07:00\": \
                     cannot parse \"garbage\" as \"2006\"",
                ),
            ),
            ("2024-01-01T00:00:00Z", None),
            ("2024-01-01T00:00:00.123Z", None),
            ("2024-01-01T1:00:00Z", None),
            ("2024-01-01T00:00:00+01:00", None),
            (
                "2024-13-01T00:00:00Z",
                Some("parsing time \"2024-13-01T00:00:00Z\": month out of range"),
            ),
            (
                "2024-02-30T00:00:00Z",
                Some("parsing time \"2024-02-30T00:00:00Z\": day out of range"),
            ),
            (
                "2024-01-01",
                Some(
                    "parsing time \"2024-01-01\" as \"2006-01-02T15:04:05Z07:00\": \
                     cannot parse \"\" as \"T\"",
                ),
            ),
            (
                "2024-01-01T25:00:00Z",
                Some("parsing time \"2024-01-01T25:00:00Z\": hour out of range"),
            ),
            (
                "2024-01-01T00:00:00+0100",
                Some(
                    "parsing time \"2024-01-01T00:00:00+0100\" as \
                     \"2006-01-02T15:04:05Z07:00\": cannot parse \"+0100\" as \"Z07:00\"",
                ),
            ),
            (
                "2024-01-01T00:00:00Zjunk",
                Some("parsing time \"2024-01-01T00:00:00Zjunk\": extra text: \"junk\""),
            ),
            (
                "2024-1-01T00:00:00Z",
                Some(
                    "parsing time \"2024-1-01T00:00:00Z\" as \"2006-01-02T15:04:05Z07:00\": \
                     cannot parse \"1-01T00:00:00Z\" as \"01\"",
                ),
            ),
            (
                "2024-01-01T00:00:00+25:00",
                Some(
                    "parsing time \"2024-01-01T00:00:00+25:00\": time zone offset hour \
                     out of range",
                ),
            ),
            (
                "2024-01-01t00:00:00Z",
                Some(
                    "parsing time \"2024-01-01t00:00:00Z\" as \"2006-01-02T15:04:05Z07:00\": \
                     cannot parse \"t00:00:00Z\" as \"T\"",
                ),
            ),
            (
                "é",
                Some(
                    "parsing time \"\\xc3\\xa9\" as \"2006-01-02T15:04:05Z07:00\": \
                     cannot parse \"\\xc3\\xa9\" as \"2006\"",
                ),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(
                error(Layout::Rfc3339, value).as_deref(),
                expected,
                "{value}"
            );
        }
    }

    #[test]
    fn micro_time_takes_exactly_six_fractional_digits() {
        assert_eq!(
            error(Layout::Rfc3339Micro, "2024-01-01T00:00:00.000000Z"),
            None
        );
        assert_eq!(
            error(Layout::Rfc3339Micro, "2024-01-01T00:00:00.123Z").as_deref(),
            Some(
                "parsing time \"2024-01-01T00:00:00.123Z\" as \
                 \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \".123Z\" as \".000000\""
            )
        );
        assert_eq!(
            error(Layout::Rfc3339Micro, "2024-01-01T00:00:00.-12345Z").as_deref(),
            Some("parsing time \"2024-01-01T00:00:00.-12345Z\": fractional second out of range")
        );
    }
}
