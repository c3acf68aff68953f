//! A scrape of `/metrics` read back: the families with their types, the
//! series names with the label names they carry, and histograms' bucket
//! bounds. Enough of the Prometheus and OpenMetrics text formats to check
//! what a dashboard or a convention expects of them.

use std::collections::{BTreeMap, BTreeSet};

/// Series names in a scrape, each with the label names it carries.
#[derive(Debug, Default)]
pub struct Scrape {
    /// Each series name (`x_total`, `x_bucket`, ...) and the label names
    /// its samples carry.
    pub series: BTreeMap<String, BTreeSet<String>>,
    /// The families, in the order of their `# TYPE` lines.
    pub families: Vec<String>,
    /// Each family's type (`counter`, `gauge`, `histogram`, ...).
    pub types: BTreeMap<String, String>,
    /// Each `_bucket` series' finite `le` bounds, ascending.
    pub bounds: BTreeMap<String, Vec<f64>>,
}

impl Scrape {
    /// Reads the Prometheus/OpenMetrics text format.
    pub fn parse(text: &str) -> Self {
        let mut scrape = Self::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    scrape.families.push(name.to_owned());
                    scrape.types.insert(name.to_owned(), kind.to_owned());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..name_end];
            let pairs = if line[name_end..].starts_with('{') {
                labels(&line[name_end + 1..])
            } else {
                Vec::new()
            };
            if name.ends_with("_bucket") {
                let bound = pairs.iter().find(|(label, _)| label == "le");
                if let Some(bound) = bound.and_then(|(_, value)| value.parse::<f64>().ok()) {
                    let bounds = scrape.bounds.entry(name.to_owned()).or_default();
                    if bound.is_finite() && !bounds.contains(&bound) {
                        bounds.push(bound);
                        bounds.sort_by(f64::total_cmp);
                    }
                }
            }
            scrape
                .series
                .entry(name.to_owned())
                .or_default()
                .extend(pairs.into_iter().map(|(label, _)| label));
        }
        scrape
    }

    /// Adds the series and families of an earlier scrape: gauges of a
    /// passing state (DataJobs being deleted) have samples only while it lasts.
    pub fn merge(&mut self, earlier: Self) {
        for (name, labels) in earlier.series {
            self.series.entry(name).or_default().extend(labels);
        }
        for family in earlier.families {
            if !self.families.contains(&family) {
                self.families.push(family);
            }
        }
        for (family, kind) in earlier.types {
            self.types.entry(family).or_insert(kind);
        }
        for (series, bounds) in earlier.bounds {
            self.bounds.entry(series).or_insert(bounds);
        }
    }

    /// The families with no sample at all.
    pub fn empty_families(&self) -> Vec<&str> {
        self.families
            .iter()
            .filter(|family| {
                !self
                    .series
                    .keys()
                    .any(|s| *s == **family || s.starts_with(&format!("{family}_")))
            })
            .map(String::as_str)
            .collect()
    }
}

/// The label names and values of `a="x",b="y"} 1`, quotes and escapes
/// respected (values are kept as written, escapes and all).
pub fn labels(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim_start_matches(',').trim().to_owned();
        // The quoted value.
        let chars = rest[eq + 1..].char_indices().skip(1);
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        pairs.push((name, rest[eq + 2..end - 1].to_owned()));
        rest = &rest[end..];
        if rest.starts_with('}') {
            break;
        }
    }
    pairs
}

/// The label names of `a="x",b="y"} 1`.
pub fn label_names(text: &str) -> Vec<String> {
    labels(text).into_iter().map(|(name, _)| name).collect()
}
