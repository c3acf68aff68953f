//! What the peers benchmark leaves in `--out`, read back: the table of
//! every operator with policyhost's ratio to each peer, and the plot.

use std::path::Path;

use plotters::prelude::RGBColor;
use serde_json::Value;

use super::{Figures, Series};
use crate::common::plot;

/// The JSON lines of a run.
pub const LINES: &str = "peers.jsonl";
/// The series of a run.
pub const SERIES: &str = "peers-series.json";
/// The plot drawn from them.
pub const PLOT: &str = "peers.svg";

/// Draws the plot of the run recorded in `out` and returns its table, in
/// Markdown.
pub fn write(out: &Path) -> anyhow::Result<String> {
    let lines = std::fs::read_to_string(out.join(LINES))?;
    let lines: Vec<Value> = lines
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let series: Vec<Series> = serde_json::from_slice(&std::fs::read(out.join(SERIES))?)?;
    let figures: Vec<Figures> = lines
        .iter()
        .filter(|l| l.get("error").is_none())
        .map(|l| serde_json::from_value(l.clone()))
        .collect::<Result<_, _>>()?;
    let jobs = figures.first().map_or(0, |f| f.jobs);
    draw(&series, &figures, jobs, &out.join(PLOT))?;
    Ok(table(&lines, &figures))
}

/// A measure of the table: its heading, and how to read it from a line.
type Measure = (&'static str, fn(&Figures) -> f64);

const MEASURES: [Measure; 6] = [
    ("requests / DataJob", |f| f.requests_per_datajob),
    ("RSS steady, MiB", |f| f.rss_steady_mib),
    ("RSS peak, MiB", |f| f.rss_peak_mib),
    ("converged, s", |f| f.converged_s),
    ("release p99, s", |f| f.release_p99_s),
    ("CPU, s", |f| f.cpu_s),
];

/// One row per operator (a failed one says why), then policyhost's value
/// over each peer's: below 1, policyhost spends less.
fn table(lines: &[Value], figures: &[Figures]) -> String {
    let heading: Vec<&str> = MEASURES.iter().map(|(name, _)| *name).collect();
    let mut out = format!(
        "| operator | {} |\n|---|{}\n",
        heading.join(" | "),
        "---:|".repeat(MEASURES.len())
    );
    for line in lines {
        let operator = line["operator"].as_str().unwrap_or("?");
        match figures.iter().find(|f| f.operator == operator) {
            Some(f) => {
                let cells: Vec<String> = MEASURES.iter().map(|(_, of)| cell(of(f))).collect();
                out += &format!("| {operator} | {} |\n", cells.join(" | "));
            }
            None => {
                let error = line["error"].as_str().unwrap_or("no figures");
                out += &format!("| {operator} | failed: {error} |\n");
            }
        }
    }
    let Some(ours) = figures.iter().find(|f| f.operator == "policyhost") else {
        return out;
    };
    out += &format!(
        "\n| policyhost ÷ | {} |\n|---|{}\n",
        heading.join(" | "),
        "---:|".repeat(MEASURES.len())
    );
    for peer in figures.iter().filter(|f| f.operator != "policyhost") {
        let ratios: Vec<String> = MEASURES
            .iter()
            .map(|(_, of)| format!("{:.2}", of(ours) / of(peer)))
            .collect();
        out += &format!("| {} | {} |\n", peer.operator, ratios.join(" | "));
    }
    out
}

/// Three significant figures at most, whole numbers from 100.
fn cell(value: f64) -> String {
    match value {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

fn color(operator: &str) -> RGBColor {
    match operator {
        "policyhost" => RGBColor(30, 90, 200),
        variant if variant.starts_with("policyhost:") => RGBColor(120, 60, 200),
        "naive" => RGBColor(200, 50, 40),
        "indexed" => RGBColor(230, 140, 20),
        _ => RGBColor(20, 150, 90),
    }
}

fn draw(series: &[Series], figures: &[Figures], jobs: usize, path: &Path) -> anyhow::Result<()> {
    let chart = plot::Chart {
        title: format!("{jobs} DataJobs created at once, real control plane"),
        jobs,
        lines: series
            .iter()
            .map(|s| {
                let f = figures.iter().find(|f| f.operator == s.operator);
                plot::Line {
                    name: s.operator.clone(),
                    color: color(&s.operator),
                    memory: &s.memory,
                    marks: f.map_or_else(Vec::new, |f| {
                        vec![
                            (f.ready_s, "ready"),
                            (s.jobs_created_at_s + f.converged_s, "converged"),
                        ]
                    }),
                    rss_note: f.map_or_else(String::new, |f| {
                        format!("{:.0} MiB steady", f.rss_steady_mib)
                    }),
                    converged: &s.converged,
                }
            })
            .collect(),
        rss_target: None,
        converge_target: None,
    };
    plot::draw(&chart, path)
}
