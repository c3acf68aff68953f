//! The JSON writer behind the builders: manifests are written straight into
//! one `String`, with no `serde_json::Value` tree and no per-field strings.
//!
//! Strings are escaped exactly as `serde_json` escapes them (`\"`, `\\`,
//! `\b \f \n \r \t`, other control characters as `\u00xx`), so a manifest
//! reads the same whichever way it was written. Most text needs no escaping
//! at all (names, labels, images): it is found clean eight bytes at a time
//! and copied in one go.

/// Appends `n` in decimal: what `write!(out, "{n}")` does, without the
/// formatting machinery, which costs a policy measurable fuel when it names
/// many children.
pub fn push_decimal(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        // `n % 10` is below 10: the cast cannot truncate.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(char::from(digit));
    }
}

/// Writes JSON into a string; the caller writes keys and punctuation.
#[derive(Debug, Default)]
pub(crate) struct Json {
    pub(crate) out: String,
}

impl Json {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            out: String::with_capacity(capacity),
        }
    }

    /// Appends JSON text as is (punctuation, keys written as `"key":`).
    pub(crate) fn raw(&mut self, text: &str) {
        self.out.push_str(text);
    }

    /// Appends one ASCII punctuation byte.
    pub(crate) fn byte(&mut self, byte: u8) {
        debug_assert!(byte.is_ascii());
        self.out.push(char::from(byte));
    }

    /// Appends `text` as a quoted, escaped JSON string.
    pub(crate) fn string(&mut self, text: &str) {
        self.out.reserve(text.len() + 2);
        self.out.push('"');
        escape_into(&mut self.out, text);
        self.out.push('"');
    }

    /// Appends an unsigned integer.
    pub(crate) fn number(&mut self, n: u64) {
        push_decimal(&mut self.out, n);
    }

    /// Appends `{"k":"v",...}` for the pairs, in order.
    pub(crate) fn object_of_strings<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) {
        self.byte(b'{');
        self.entries(pairs, true);
        self.byte(b'}');
    }

    /// Appends `"k":"v"` entries separated by commas; a comma first unless
    /// `first`.
    pub(crate) fn entries<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        pairs: impl IntoIterator<Item = (K, V)>,
        mut first: bool,
    ) {
        for (key, value) in pairs {
            if !first {
                self.byte(b',');
            }
            first = false;
            self.string(key.as_ref());
            self.byte(b':');
            self.string(value.as_ref());
        }
    }

    /// Appends `["a","b",...]`.
    pub(crate) fn array_of_strings<S: AsRef<str>>(&mut self, items: &[S]) {
        self.byte(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.byte(b',');
            }
            self.string(item.as_ref());
        }
        self.byte(b']');
    }

    pub(crate) fn len(&self) -> usize {
        self.out.len()
    }

    pub(crate) fn into_string(self) -> String {
        self.out
    }
}

/// Appends `text` escaped for the inside of a JSON string.
fn escape_into(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut at = clean_prefix(bytes);
    while at < bytes.len() {
        let byte = bytes[at];
        let escape = ESCAPE[usize::from(byte)];
        if escape == 0 {
            at += 1;
            continue;
        }
        out.push_str(&text[start..at]);
        match escape {
            b'u' => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
            short => {
                out.push('\\');
                out.push(char::from(short));
            }
        }
        at += 1;
        start = at;
    }
    out.push_str(&text[start..]);
}

/// How many leading bytes need no escaping, scanning eight at a time.
fn clean_prefix(bytes: &[u8]) -> usize {
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        if needs_escape(u64::from_le_bytes(word)) {
            return at;
        }
        at += 8;
    }
    // The last few bytes, padded with a letter that needs no escaping.
    let tail = chunks.remainder();
    let mut word = [b'a'; 8];
    word[..tail.len()].copy_from_slice(tail);
    if needs_escape(u64::from_le_bytes(word)) {
        at
    } else {
        bytes.len()
    }
}

/// Whether one of the eight bytes is below 0x20, `"` or `\` (the classic
/// "has less than" and "has zero byte" word tricks; bytes of 0x80 and above
/// never match, and UTF-8 never needs escaping).
fn needs_escape(x: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v;
    let below_space = x.wrapping_sub(ONES * 0x20) & !x;
    let quote = zero_byte(x ^ (ONES * u64::from(b'"')));
    let backslash = zero_byte(x ^ (ONES * u64::from(b'\\')));
    (below_space | quote | backslash) & HIGH != 0
}

const HEX: [u8; 16] = *b"0123456789abcdef";

/// For each byte: 0 if it is written as is, else the character after the
/// backslash (`u` for `\u00xx`). The same table as `serde_json`'s.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(text: &str) -> String {
        let mut json = Json::default();
        json.string(text);
        json.into_string()
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_escapes_them() {
        let mut samples: Vec<String> = [
            "",
            "plain",
            "busybox:1.36",
            "a \"quoted\" word",
            "back\\slash",
            "tab\tnew\nline\rform\u{c}bell\u{8}",
            "\u{0}\u{1}\u{1f}\u{7f}",
            "é ü 漢字 🎉",
            "exactly8",
            "sixteen bytes!!!",
            "seventeen bytes!\"",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for byte in 0u8..=0x7f {
            for at in 0..10 {
                let mut text = "x".repeat(at);
                text.push(char::from(byte));
                text.push_str("tail");
                samples.push(text);
            }
        }
        for text in &samples {
            assert_eq!(
                quoted(text),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 65535, u64::from(u32::MAX), u64::MAX] {
            let mut json = Json::default();
            json.number(n);
            assert_eq!(json.into_string(), n.to_string());
        }
    }

    #[test]
    fn objects_and_arrays_of_strings_are_valid_json() {
        let mut json = Json::default();
        json.object_of_strings([("a", "1"), ("b\"", "2\n")]);
        json.array_of_strings(&["x", "y"]);
        json.array_of_strings::<&str>(&[]);
        assert_eq!(json.into_string(), r#"{"a":"1","b\"":"2\n"}["x","y"][]"#);
    }
}
