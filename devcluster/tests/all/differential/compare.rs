//! Normalising answers (what two servers must differ in) and comparing them.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use super::session::Exchange;

/// Rewrites what differs between any two servers, or two runs: uids and
/// generated names become `<uid 1>`, `<name 1>` … in order of appearance
/// (so references to them still compare), resourceVersions `<rv>`,
/// timestamps `<time>`, continue tokens `<continue>`, table ages `<age>`;
/// managedFields are put in an order that does not depend on time.
/// One per scenario: the numbering spans its answers.
#[derive(Default)]
pub struct Normaliser {
    /// Each uid or generated name seen, and what it becomes.
    names: BTreeMap<String, String>,
}

const TIMESTAMPS: &[&str] = &[
    "creationTimestamp",
    "deletionTimestamp",
    "time",
    "lastTransitionTime",
    "lastUpdateTime",
];

impl Normaliser {
    pub fn normalise(&mut self, mut body: Value) -> Value {
        self.learn(&body);
        self.rewrite(&mut body);
        body
    }

    /// Gives each new uid and generated name its placeholder.
    fn learn(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(uid)) = map.get("uid") {
                    self.name(uid, "uid");
                }
                if let (Some(Value::String(prefix)), Some(Value::String(name))) =
                    (map.get("generateName"), map.get("name"))
                    && let Some(suffix) = name.strip_prefix(prefix.as_str())
                {
                    self.name(suffix, &format!("{prefix}…"));
                }
                map.values().for_each(|v| self.learn(v));
            }
            Value::Array(items) => items.iter().for_each(|v| self.learn(v)),
            _ => {}
        }
    }

    fn name(&mut self, value: &str, kind: &str) {
        if value.is_empty() || self.names.contains_key(value) {
            return;
        }
        let placeholder = format!("<{kind} {}>", self.names.len() + 1);
        self.names.insert(value.to_owned(), placeholder);
    }

    fn rewrite(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                // Keys name uids too: managedFields' `k:{"uid":…}`.
                if map
                    .keys()
                    .any(|key| self.names.keys().any(|seen| key.contains(seen.as_str())))
                {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(key, field)| (self.replace_names(&key), field))
                        .collect();
                }
                for (key, field) in map.iter_mut() {
                    match (key.as_str(), &field) {
                        ("resourceVersion", Value::String(s)) if !s.is_empty() => {
                            *field = Value::from("<rv>");
                        }
                        ("continue", Value::String(s)) if !s.is_empty() => {
                            *field = Value::from("<continue>");
                        }
                        (key, Value::String(_)) if TIMESTAMPS.contains(&key) => {
                            *field = Value::from("<time>");
                        }
                        _ => self.rewrite(field),
                    }
                }
                if map.get("kind").and_then(Value::as_str) == Some("Table") {
                    age_cells(map);
                }
                if let Some(Value::Array(entries)) = map.get_mut("managedFields") {
                    in_timeless_order(entries);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.rewrite(v)),
            Value::String(text) => *text = self.replace_names(text),
            _ => {}
        }
    }

    fn replace_names(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (seen, placeholder) in &self.names {
            if text.contains(seen.as_str()) {
                text = text.replace(seen.as_str(), placeholder);
            }
        }
        text
    }
}

/// Both servers sort managedFields by operation, time (in seconds),
/// manager, API version and subresource; with times normalised, two writes
/// a second boundary apart would compare as a difference of order. Without
/// the time, the order is the same on any server.
fn in_timeless_order(entries: &mut [Value]) {
    entries.sort_by_cached_key(|entry| {
        ["operation", "manager", "apiVersion", "subresource"]
            .map(|key| entry[key].as_str().unwrap_or_default().to_owned())
    });
}

/// A Table's `Age` and date-typed cells become `<age>`.
fn age_cells(table: &mut Map<String, Value>) {
    let Some(Value::Array(columns)) = table.get("columnDefinitions") else {
        return;
    };
    let dated: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c["name"] == "Age" || c["type"] == "date")
        .map(|(i, _)| i)
        .collect();
    let Some(Value::Array(rows)) = table.get_mut("rows") else {
        return;
    };
    for row in rows {
        if let Some(Value::Array(cells)) = row.get_mut("cells") {
            for &i in &dated {
                if let Some(cell) = cells.get_mut(i) {
                    *cell = Value::from("<age>");
                }
            }
        }
    }
}

/// One place where devcluster answered otherwise than the real server.
#[derive(Debug, Clone)]
pub struct Difference {
    pub scenario: String,
    pub label: String,
    /// A JSON pointer into the body, or `/@status` for the status code.
    pub pointer: String,
    pub devcluster: Option<Value>,
    pub real: Option<Value>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |value: &Option<Value>| match value {
            None => "(absent)".to_owned(),
            Some(value) => {
                let text = value.to_string();
                match text.char_indices().nth(240) {
                    Some((end, _)) => format!("{}…", &text[..end]),
                    None => text,
                }
            }
        };
        write!(
            f,
            "  {} / {} {}: devcluster {}, real {}",
            self.scenario,
            self.label,
            self.pointer,
            show(&self.devcluster),
            show(&self.real)
        )
    }
}

/// What a comparison covered, and where the answers differ.
#[derive(Debug, Default)]
pub struct Report {
    /// Answers compared (a watch's events count as one).
    pub exchanges: usize,
    /// Status codes and leaf values compared.
    pub fields: usize,
    pub differences: Vec<Difference>,
    /// The scenarios compared.
    pub scenarios: Vec<String>,
}

impl Report {
    /// Compares one scenario's answers from the two servers, in order.
    pub fn add(&mut self, scenario: &str, devcluster: &[Exchange], real: &[Exchange]) {
        self.scenarios.push(scenario.to_owned());
        assert_eq!(
            labels(devcluster),
            labels(real),
            "{scenario}: both servers ran the same requests"
        );
        for (dev, real) in devcluster.iter().zip(real) {
            let mut difference = |pointer: String, d: Option<&Value>, r: Option<&Value>| {
                self.differences.push(Difference {
                    scenario: scenario.to_owned(),
                    label: dev.label.clone(),
                    pointer,
                    devcluster: d.cloned(),
                    real: r.cloned(),
                });
            };
            self.exchanges += 1;
            self.fields += 1;
            if dev.status != real.status {
                difference(
                    "/@status".to_owned(),
                    Some(&dev.status.into()),
                    Some(&real.status.into()),
                );
            }
            self.fields += compare(
                String::new(),
                Some(&dev.body),
                Some(&real.body),
                &mut difference,
            );
        }
    }
}

fn labels(exchanges: &[Exchange]) -> Vec<&str> {
    exchanges.iter().map(|e| e.label.as_str()).collect()
}

/// Compares two values leaf by leaf under `pointer`; reports each leaf or
/// subtree that differs; returns how many leaves it compared.
fn compare(
    pointer: String,
    devcluster: Option<&Value>,
    real: Option<&Value>,
    difference: &mut impl FnMut(String, Option<&Value>, Option<&Value>),
) -> usize {
    match (devcluster, real) {
        (Some(Value::Object(d)), Some(Value::Object(r))) => {
            let keys: std::collections::BTreeSet<&String> = d.keys().chain(r.keys()).collect();
            keys.into_iter()
                .map(|key| {
                    let escaped = key.replace('~', "~0").replace('/', "~1");
                    compare(
                        format!("{pointer}/{escaped}"),
                        d.get(key),
                        r.get(key),
                        difference,
                    )
                })
                .sum()
        }
        (Some(Value::Array(d)), Some(Value::Array(r))) => (0..d.len().max(r.len()))
            .map(|i| compare(format!("{pointer}/{i}"), d.get(i), r.get(i), difference))
            .sum(),
        (d, r) => {
            if d != r {
                difference(pointer, d, r);
            }
            1
        }
    }
}
