//! The scale benchmarks' picture: each operator's RSS over time (log
//! scale) beside the DataJobs it converged over time.

use std::path::Path;

use plotters::prelude::*;

use super::sampler::Sample;

/// One operator's lines on both panels.
pub struct Line<'a> {
    /// Its name in both legends.
    pub name: String,
    pub color: RGBColor,
    /// RSS over seconds since the operator started.
    pub memory: &'a [Sample],
    /// Moments marked on its RSS line (seconds since it started), labelled.
    pub marks: Vec<(f64, &'static str)>,
    /// What its RSS legend says after the name.
    pub rss_note: String,
    /// `(seconds since the first create, DataJobs converged)`.
    pub converged: &'a [(f64, usize)],
}

/// The whole picture.
pub struct Chart<'a> {
    /// The title of the convergence panel.
    pub title: String,
    pub jobs: usize,
    pub lines: Vec<Line<'a>>,
    /// A horizontal guide on the RSS panel, MiB, labelled.
    pub rss_target: Option<(f64, String)>,
    /// A vertical guide on the convergence panel, seconds, labelled.
    pub converge_target: Option<(f64, String)>,
}

/// Draws `chart` as an SVG at `path`.
pub fn draw(chart: &Chart<'_>, path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    rss(chart, &left)?;
    convergence(chart, &right)?;
    root.present()?;
    Ok(())
}

type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

fn rss(chart: &Chart<'_>, area: &Area<'_>) -> anyhow::Result<()> {
    let t_max = chart
        .lines
        .iter()
        .filter_map(|l| l.memory.last().map(|s| s.t))
        .fold(1.0, f64::max);
    let rss_max = chart
        .lines
        .iter()
        .flat_map(|l| l.memory.iter().map(|s| s.rss_mib))
        .chain(chart.rss_target.as_ref().map(|(mib, _)| *mib))
        .fold(16.0, f64::max);
    let mut panel = ChartBuilder::on(area)
        .caption("Operator RSS", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max * 1.02, (4.0..rss_max * 1.5).log_scale())?;
    panel
        .configure_mesh()
        .x_desc("seconds since the operator started")
        .y_desc("RSS, MiB (log scale)")
        .draw()?;
    for line in &chart.lines {
        let c = line.color;
        panel
            .draw_series(LineSeries::new(
                line.memory.iter().map(|s| (s.t, s.rss_mib)),
                c.stroke_width(2),
            ))?
            .label(format!("{}: {}", line.name, line.rss_note))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        for &(t, label) in &line.marks {
            let nearest = line
                .memory
                .iter()
                .min_by(|a, b| (a.t - t).abs().total_cmp(&(b.t - t).abs()));
            if let Some(s) = nearest {
                panel.draw_series([Circle::new((s.t, s.rss_mib), 4, c.filled())])?;
                panel.draw_series([Text::new(
                    label,
                    (s.t, s.rss_mib * 1.15),
                    ("sans-serif", 13).into_font().color(&c),
                )])?;
            }
        }
    }
    if let Some((mib, label)) = &chart.rss_target {
        panel
            .draw_series(LineSeries::new(
                [(0.0, *mib), (t_max * 1.02, *mib)],
                BLACK.mix(0.4),
            ))?
            .label(label.as_str())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    }
    legend(&mut panel)
}

fn convergence(chart: &Chart<'_>, area: &Area<'_>) -> anyhow::Result<()> {
    let x_max = chart
        .lines
        .iter()
        .filter_map(|l| l.converged.last().map(|(t, _)| *t))
        .chain(chart.converge_target.as_ref().map(|(t, _)| t * 1.1))
        .fold(1.0, f64::max)
        * 1.05;
    let mut panel = ChartBuilder::on(area)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0usize..chart.jobs + chart.jobs / 20)?;
    panel
        .configure_mesh()
        .x_desc("seconds since the first create")
        .y_desc("DataJobs converged")
        .draw()?;
    for line in &chart.lines {
        let c = line.color;
        let all = line.converged.last().map_or(0.0, |(t, _)| *t);
        panel
            .draw_series(LineSeries::new(
                line.converged.iter().copied(),
                c.stroke_width(2),
            ))?
            .label(format!("{}: all after {all:.1} s", line.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    if let Some((seconds, label)) = &chart.converge_target {
        panel
            .draw_series(LineSeries::new(
                [(*seconds, 0), (*seconds, chart.jobs)],
                BLACK.mix(0.4),
            ))?
            .label(label.as_str())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    }
    legend(&mut panel)
}

fn legend<'a, X, Y>(
    panel: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> anyhow::Result<()>
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
{
    panel
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
