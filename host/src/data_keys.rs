//! A ConfigMap's `data`, read key by key: the one reader of the policy
//! settings ([`crate::policies::configmap`]) and of the grants
//! ([`crate::grants`]). Each value is trimmed and handed to its
//! parser; the first bad value or unknown key is an error naming it.

use std::collections::BTreeMap;

/// What is wrong with one key of a ConfigMap's `data`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A value does not parse or is out of range.
    #[error("`data.{key}` is `{value}`; expected {expected}")]
    Invalid {
        /// The key.
        key: String,
        /// Its value.
        value: String,
        /// What it should look like.
        expected: &'static str,
    },
    /// A key the host does not read (a typo would otherwise be ignored).
    #[error("unknown key `data.{key}`{of}; the keys are {}", .keys.join(", "))]
    Unknown {
        /// The key.
        key: String,
        /// What the ConfigMap is, when the message needs it (` in the grant`).
        of: &'static str,
        /// Every key read.
        keys: &'static [&'static str],
    },
}

/// One key of `data` and its value.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The key.
    pub key: &'a str,
    /// The value as written.
    pub value: &'a str,
}

impl Entry<'_> {
    /// The value, trimmed.
    #[must_use]
    pub fn text(&self) -> &str {
        self.value.trim()
    }

    /// The trimmed value through `parse`; `None` is [`KeyError::Invalid`]
    /// naming the key and what was `expected`.
    ///
    /// # Errors
    ///
    /// [`KeyError::Invalid`] when `parse` gives `None`.
    pub fn parse<T>(
        &self,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, KeyError> {
        parse(self.text()).ok_or_else(|| KeyError::Invalid {
            key: self.key.to_owned(),
            value: self.value.to_owned(),
            expected,
        })
    }

    /// The error of a key not among `keys`, in a ConfigMap `of`.
    #[must_use]
    pub fn unknown(&self, of: &'static str, keys: &'static [&'static str]) -> KeyError {
        KeyError::Unknown {
            key: self.key.to_owned(),
            of,
            keys,
        }
    }
}

/// Each key of `data`, in key order.
pub fn entries(data: &BTreeMap<String, String>) -> impl Iterator<Item = Entry<'_>> {
    data.iter().map(|(key, value)| Entry { key, value })
}

/// A ConfigMap's `data` of these keys and values, for the readers' tests.
#[cfg(test)]
pub(crate) fn data_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_names_its_key_its_value_and_what_was_expected() {
        let data = BTreeMap::from([("fuel".to_owned(), " ten ".to_owned())]);
        let entry = entries(&data).next().unwrap();
        assert_eq!(entry.text(), "ten");
        let error = entry
            .parse("a positive integer", |t| t.parse::<u64>().ok())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "`data.fuel` is ` ten `; expected a positive integer"
        );
        let ok = BTreeMap::from([("fuel".to_owned(), " 10\n".to_owned())]);
        let entry = entries(&ok).next().unwrap();
        assert_eq!(entry.parse("n", |t| t.parse::<u64>().ok()), Ok(10));
    }

    #[test]
    fn an_unknown_key_lists_the_keys_read() {
        let data = BTreeMap::from([("fule".to_owned(), "1".to_owned())]);
        let entry = entries(&data).next().unwrap();
        assert_eq!(
            entry
                .unknown(" in the grant", &["fuel", "memory"])
                .to_string(),
            "unknown key `data.fule` in the grant; the keys are fuel, memory"
        );
        assert_eq!(
            entry.unknown("", &["fuel"]).to_string(),
            "unknown key `data.fule`; the keys are fuel"
        );
    }
}
