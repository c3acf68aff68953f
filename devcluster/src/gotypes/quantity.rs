//! Whether a text is a `resource.Quantity`, by the steps of
//! `k8s.io/apimachinery`'s `ParseQuantity`, and its three errors.

/// Why `ParseQuantity` refuses a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// The text is no number with a suffix (`ErrFormatWrong`).
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// The number has no digits (`ErrNumeric`).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is none of Kubernetes' (`ErrSuffix`).
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// The parts `parseQuantityString` splits a quantity into.
struct Parts<'a> {
    /// Sign, digits and fraction as written.
    value: &'a str,
    /// The integer digits without leading zeros ("0" for none).
    num: &'a str,
    /// The fractional digits.
    denom: &'a str,
    suffix: &'a str,
}

fn digits_end(text: &[u8], from: usize) -> usize {
    from + text[from..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count()
}

/// `parseQuantityString`.
fn split(text: &str) -> Result<Parts<'_>, Error> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut pos = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    pos += bytes[pos..].iter().take_while(|b| **b == b'0').count();
    if pos >= end {
        return Ok(Parts {
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let num_end = digits_end(bytes, pos);
    let num = if num_end == pos {
        "0"
    } else {
        &text[pos..num_end]
    };
    if num_end >= end {
        return Ok(Parts {
            value: text,
            num,
            denom: "",
            suffix: "",
        });
    }
    pos = num_end;
    let mut denom = "";
    if bytes[pos] == b'.' {
        let denom_end = digits_end(bytes, pos + 1);
        denom = &text[pos + 1..denom_end];
        if denom_end >= end {
            return Ok(Parts {
                value: text,
                num,
                denom,
                suffix: "",
            });
        }
        pos = denom_end;
    }
    let value = &text[..pos];
    let suffix_start = pos;
    pos += bytes[pos..]
        .iter()
        .take_while(|b| b"eEinumkKMGTP".contains(b))
        .count();
    if pos < end && matches!(bytes[pos], b'-' | b'+') {
        pos += 1;
    }
    if digits_end(bytes, pos) < end {
        return Err(Error::Format);
    }
    Ok(Parts {
        value,
        num,
        denom,
        suffix: &text[suffix_start..],
    })
}

/// How a suffix scales the number.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// A power of ten: `m`, `k`, `M`, ... (and none), or `e<n>`.
    Decimal(i64),
    /// A power of two: `Ki`, `Mi`, ...
    Binary(u32),
}

fn interpret(suffix: &str) -> Result<Scale, Error> {
    let scale = match suffix {
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "" => Scale::Decimal(0),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        "Ki" => Scale::Binary(10),
        "Mi" => Scale::Binary(20),
        "Gi" => Scale::Binary(30),
        "Ti" => Scale::Binary(40),
        "Pi" => Scale::Binary(50),
        "Ei" => Scale::Binary(60),
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .filter(|rest| !rest.is_empty())
                .and_then(|rest| rest.parse::<i64>().ok())
                .ok_or(Error::Suffix)?;
            // Go keeps the exponent as an int32.
            Scale::Decimal(i64::from(exponent as i32))
        }
    };
    Ok(scale)
}

/// Parses `text` as `resource.ParseQuantity` does, for its error.
pub(crate) fn parse(text: &str) -> Result<(), Error> {
    if text.is_empty() {
        return Err(Error::Format);
    }
    if text == "0" {
        return Ok(());
    }
    let parts = split(text)?;
    let scale = interpret(parts.suffix)?;
    let digits = parts.num.len() + parts.denom.len();
    // The fast path reads the digits as an int64; whatever it cannot take
    // goes to arbitrary precision, which only refuses a number without
    // digits.
    let fast = match scale {
        Scale::Decimal(exponent) => {
            digits <= 18 && exponent - i64::try_from(parts.denom.len()).unwrap_or(i64::MAX) >= -9
        }
        Scale::Binary(exponent) => {
            let num = i64::try_from(parts.num.len()).unwrap_or(i64::MAX);
            // Go's precision, 15 - digits - exponent·3/10 - 1, is not negative.
            parts.denom.is_empty() && num + i64::from(exponent) * 3 / 10 < 15
        }
    };
    if fast || parts.value.bytes().any(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(Error::Numeric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_refused_as_parse_quantity_refuses_them() {
        // The expectations are k8s.io/apimachinery v0.37's ParseQuantity.
        for (text, expected) in [
            ("100m", Ok(())),
            ("1.5Gi", Ok(())),
            ("1e3", Ok(())),
            ("0", Ok(())),
            ("-0.5", Ok(())),
            ("1.", Ok(())),
            (".", Ok(())),
            ("", Err(Error::Format)),
            ("abc", Err(Error::Format)),
            ("true", Err(Error::Format)),
            ("{\"a\":1}", Err(Error::Format)),
            ("1x", Err(Error::Format)),
            ("1Mb", Err(Error::Format)),
            ("1Q", Err(Error::Format)),
            ("1ki", Err(Error::Suffix)),
            ("1iK", Err(Error::Suffix)),
            ("1e", Err(Error::Suffix)),
            (".Ki", Ok(())),
            ("+", Ok(())),
            ("12345678901234567890", Ok(())),
            ("9999999999999999999Ki", Ok(())),
            (".e-10", Err(Error::Numeric)),
            ("-.E-20", Err(Error::Numeric)),
            (".Pi", Err(Error::Numeric)),
            ("Ei", Err(Error::Numeric)),
            ("0Ei", Ok(())),
        ] {
            assert_eq!(parse(text), expected, "{text:?}");
        }
    }
}
