//! Where Go's `base64.StdEncoding` finds a `[]byte` field's text corrupt.
//!
//! kube-apiserver reports the byte offset of Go's `CorruptInputError`
//! (`illegal base64 data at input byte 3`); the offset depends on how Go
//! walks the text (line breaks skipped, padding checked per quantum), so
//! the walk is Go's, quantum by quantum.

/// The offset Go's decoder reports for `text`, or `None` when it decodes.
pub(crate) fn corrupt_at(text: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < text.len() {
        match quantum(text, at) {
            Ok(next) => at = next,
            Err(offset) => return Some(offset),
        }
    }
    None
}

fn in_alphabet(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'+' || byte == b'/'
}

fn is_line_break(byte: u8) -> bool {
    byte == b'\n' || byte == b'\r'
}

fn skip_line_breaks(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && is_line_break(text[at]) {
        at += 1;
    }
    at
}

/// Go's `decodeQuantum`: four symbols from `at`; `Ok` with where the next
/// quantum starts, `Err` with the offset of the corruption (Go's `Err`
/// swapped: the error is what the caller wants).
fn quantum(text: &[u8], mut at: usize) -> Result<usize, usize> {
    let mut symbols = 0;
    while symbols < 4 {
        if at == text.len() {
            // Text ending inside a quantum lacks its padding.
            return if symbols == 0 {
                Ok(at)
            } else {
                Err(at - symbols)
            };
        }
        let byte = text[at];
        at += 1;
        if in_alphabet(byte) {
            symbols += 1;
            continue;
        }
        if is_line_break(byte) {
            continue;
        }
        if byte != b'=' || symbols < 2 {
            return Err(at - 1);
        }
        if symbols == 2 {
            // `==` is expected; the first `=` is read.
            at = skip_line_breaks(text, at);
            if at == text.len() {
                return Err(text.len());
            }
            if text[at] != b'=' {
                return Err(at - 1);
            }
            at += 1;
        }
        at = skip_line_breaks(text, at);
        // Anything after the padding is trailing garbage.
        return if at < text.len() { Err(at) } else { Ok(at) };
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_the_ones_go_reports() {
        for (text, offset) in [
            ("aGVsbG8=", None),
            ("aGVs\nbG8=\n", None),
            ("", None),
            ("!!", Some(0)),
            ("not base64!", Some(3)),
            ("aGVsbG8", Some(4)),
            ("aGVsbA=", Some(7)),
            ("aGVsbA=x", Some(6)),
            ("aGVsbG8=aGVs", Some(8)),
            ("a===", Some(1)),
            ("aGVsbA=\n=", None),
            ("aG\r\nVsbA==\n\nx", Some(12)),
        ] {
            assert_eq!(corrupt_at(text.as_bytes()), offset, "{text:?}");
        }
    }
}
