//! The values of the time flags: one grammar, an integer and a unit
//! (`500ms`, `2s`, `1m`, `1h`), the one a policy ConfigMap's `timeout`
//! takes. A flag's former spelling, a bare number in the unit the flag took
//! before or a decimal with a unit, still reads for one release, with a
//! warning that shows the new spelling.

use std::fmt;
use std::time::Duration;

use policyhost::quantity::{format_duration, parse_duration};

use super::terminal::eprintln;

/// A time flag's value that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// In neither the grammar nor a former spelling.
    #[error("`{0}` is not a duration: write an integer and a unit, such as 500ms, 2s, 1m or 1h")]
    Malformed(String),
    /// Zero, for a flag that needs some time.
    #[error("`{0}`: this flag needs a duration above zero")]
    Zero(String),
}

/// A time flag's value; shown (in `--help`'s defaults) in the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DurationArg(pub(crate) Duration);

impl From<Duration> for DurationArg {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl fmt::Display for DurationArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

/// The unit a flag's bare numbers were in before the one grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Former {
    Seconds,
    Millis,
}

/// The value of a flag whose bare numbers were seconds.
pub(crate) fn seconds_before(text: &str) -> Result<DurationArg, DurationError> {
    read(text, Former::Seconds)
}

/// The value of a flag whose bare numbers were milliseconds.
pub(crate) fn millis_before(text: &str) -> Result<DurationArg, DurationError> {
    read(text, Former::Millis)
}

/// [`millis_before`], refusing zero.
pub(crate) fn positive_millis_before(text: &str) -> Result<DurationArg, DurationError> {
    let value = millis_before(text)?;
    if value.0.is_zero() {
        return Err(DurationError::Zero(text.trim().to_owned()));
    }
    Ok(value)
}

fn read(text: &str, former: Former) -> Result<DurationArg, DurationError> {
    let text = text.trim();
    if let Some(duration) = parse_duration(text) {
        return Ok(DurationArg(duration));
    }
    let duration =
        formerly(text, former).ok_or_else(|| DurationError::Malformed(text.to_owned()))?;
    eprintln!(
        "warning: the duration `{text}` is spelled the old way, which the next release refuses: write {}",
        format_duration(duration)
    );
    Ok(DurationArg(duration))
}

/// A former spelling: a bare number in the flag's former unit, or a decimal
/// with a unit.
fn formerly(text: &str, former: Former) -> Option<Duration> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let seconds = match (unit, former) {
        ("", Former::Seconds) | ("s", _) => value,
        ("", Former::Millis) | ("ms", _) => value / 1000.0,
        ("m", _) => value * 60.0,
        ("h", _) => value * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_reads_the_same_whatever_the_former_unit() {
        for read in [seconds_before, millis_before] {
            assert_eq!(read("500ms"), Ok(DurationArg(Duration::from_millis(500))));
            assert_eq!(read("2s"), Ok(DurationArg(Duration::from_secs(2))));
            assert_eq!(read("1m"), Ok(DurationArg(Duration::from_secs(60))));
            assert_eq!(read("1h"), Ok(DurationArg(Duration::from_secs(3600))));
            assert_eq!(read(" 15s "), Ok(DurationArg(Duration::from_secs(15))));
        }
    }

    #[test]
    fn a_former_spelling_reads_in_the_flags_former_unit() {
        assert_eq!(seconds_before("3"), Ok(DurationArg(Duration::from_secs(3))));
        assert_eq!(
            millis_before("3"),
            Ok(DurationArg(Duration::from_millis(3)))
        );
        assert_eq!(
            seconds_before("1.5s"),
            Ok(DurationArg(Duration::from_millis(1500)))
        );
        assert_eq!(
            seconds_before("2.5"),
            Ok(DurationArg(Duration::from_millis(2500)))
        );
        assert_eq!(
            millis_before("0.5m"),
            Ok(DurationArg(Duration::from_secs(30)))
        );
    }

    #[test]
    fn a_flag_that_needs_time_refuses_zero_in_any_spelling() {
        for text in ["0s", "0ms", "0"] {
            assert_eq!(
                positive_millis_before(text),
                Err(DurationError::Zero(text.to_owned()))
            );
        }
        assert_eq!(
            positive_millis_before("1ms"),
            Ok(DurationArg(Duration::from_millis(1)))
        );
    }

    #[test]
    fn anything_else_is_refused_with_the_grammar() {
        for text in ["", "s", "3d", "-1s", "1m30s", "1e3ms", "two seconds"] {
            let error = seconds_before(text).expect_err(text);
            assert!(error.to_string().contains("500ms, 2s, 1m or 1h"), "{error}");
        }
    }
}
