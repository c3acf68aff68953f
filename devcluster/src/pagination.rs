//! Continue tokens for paginated lists: the list's resourceVersion and the last key
//! returned, base64url-encoded JSON like kube-apiserver's.

use serde::{Deserialize, Serialize};

use crate::object::ObjectKey;

/// Why a continue token was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Not base64url.
    #[error("continue key is not valid: illegal base64 data")]
    Base64,
    /// Not the JSON we write.
    #[error(
        "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
    )]
    Json,
}

/// Results of token decoding.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    /// The resourceVersion the first page was read at.
    pub(crate) rv: u64,
    /// The last key of the previous page.
    pub(crate) after: ObjectKey,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: u64,
    start: String,
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn encode64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn decode64(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = ALPHABET.iter().position(|&a| a == c).ok_or(Error::Base64)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

impl Token {
    /// Encodes the token.
    pub(crate) fn encode(&self) -> String {
        let wire = Wire {
            v: "meta.k8s.io/v1".into(),
            rv: self.rv,
            start: format!("{}/{}\u{0}", self.after.namespace, self.after.name),
        };
        encode64(serde_json::to_string(&wire).unwrap_or_default().as_bytes())
    }

    /// Decodes a token from a `continue` parameter.
    pub(crate) fn decode(s: &str) -> Result<Self> {
        let raw = decode64(s)?;
        let wire: Wire = serde_json::from_slice(&raw).map_err(|_| Error::Json)?;
        let start = wire.start.strip_suffix('\u{0}').ok_or(Error::Json)?;
        let (namespace, name) = start.split_once('/').ok_or(Error::Json)?;
        Ok(Self {
            rv: wire.rv,
            after: ObjectKey::new(namespace, name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let t = Token {
            rv: 42,
            after: ObjectKey::new("ns", "pod-7"),
        };
        assert_eq!(Token::decode(&t.encode()), Ok(t));
    }

    #[test]
    fn base64url_matches_the_standard_alphabet() {
        assert_eq!(encode64(b"foob"), "Zm9vYg");
        assert_eq!(decode64("Zm9vYmFy").unwrap(), b"foobar");
    }

    #[test]
    fn garbage_tokens_are_rejected() {
        assert_eq!(Token::decode("!!"), Err(Error::Base64));
        assert_eq!(Token::decode("Zm9v"), Err(Error::Json));
    }
}
