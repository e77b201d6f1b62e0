//! The report's charts (SVG, drawn with `plotters`): throughput over time, space over time, and I/Os per get
//! against the cache size.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::Result1;

/// One colour per system, the same in every chart.
fn colour(system: &str) -> RGBColor {
    match system {
        "letus" => RGBColor(214, 39, 40),
        "rocksdb" => RGBColor(127, 127, 127),
        "mpt" => RGBColor(31, 119, 180),
        "jmt" => RGBColor(44, 160, 44),
        "nomt" => RGBColor(148, 103, 189),
        _ => BLACK,
    }
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plot: {e}")
}

const SIZE: (u32, u32) = (900, 520);

/// The chart frame every chart shares: white SVG of [`SIZE`], a caption, margins and label areas.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
) -> Result<ChartBuilder<'a, 'b, SVGBackend<'b>>> {
    root.fill(&WHITE).map_err(err)?;
    let mut b = ChartBuilder::on(root);
    b.caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    Ok(b)
}

/// Named point series, one per system.
type Series<'a> = Vec<(&'a str, Vec<(f64, f64)>)>;

/// The smallest and largest x and y over every series (the largest at least 1.0).
fn extent(series: &Series) -> ((f64, f64), (f64, f64)) {
    let pts = || series.iter().flat_map(|(_, p)| p.iter());
    let min = |f: fn(&(f64, f64)) -> f64| pts().map(f).fold(f64::MAX, f64::min);
    let max = |f: fn(&(f64, f64)) -> f64| pts().map(f).fold(1.0, f64::max);
    ((min(|p| p.0), max(|p| p.0)), (min(|p| p.1), max(|p| p.1)))
}

/// Draws each series as a line in its system's colour (with dots when `dots`), then the legend at `legend`.
fn draw_lines<'a, DB, X, Y>(
    c: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: Series,
    dots: bool,
    legend: SeriesLabelPosition,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (name, pts) in series {
        let col = colour(name);
        c.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        if dots {
            c.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))
                .map_err(err)?;
        }
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(legend)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Committed updates per second in each window of measured blocks (log scale: the systems differ by 70x).
pub fn throughput(results: &[Result1], load_blocks: u64, path: &Path) -> Result<()> {
    let series: Series = results
        .iter()
        .map(|r| {
            let pts = r
                .series
                .iter()
                .filter(|s| !s.load && s.updates_per_sec > 0.0)
                .map(|s| ((s.version - load_blocks) as f64, s.updates_per_sec))
                .collect();
            (r.system.as_str(), pts)
        })
        .collect();
    let ((_, x_max), (y_min, y_max)) = extent(&series);
    let (y_min, y_max) = (y_min.max(1.0) / 2.0, y_max * 2.0);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let mut c = frame(
        &root,
        "Committed updates per second over time (durable commit per block)",
    )?
    .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
    .map_err(err)?;
    c.configure_mesh()
        .x_desc("measured block")
        .y_desc("updates/s (log)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    draw_lines(&mut c, series, false, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Disk bytes used after every load block and every window of measured blocks.
pub fn space(results: &[Result1], path: &Path) -> Result<()> {
    let series: Series = results
        .iter()
        .map(|r| {
            let pts = r
                .series
                .iter()
                .map(|s| (s.version as f64, s.disk_bytes as f64 / (1 << 20) as f64))
                .collect();
            (r.system.as_str(), pts)
        })
        .collect();
    let ((_, x_max), (_, y_max)) = extent(&series);
    let y_max = y_max * 1.1;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let mut c = frame(&root, "Disk space over time (load, then measured blocks)")?
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("version (block number, load blocks included)")
        .y_desc("MiB on disk")
        .draw()
        .map_err(err)?;
    draw_lines(&mut c, series, false, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)?;
    Ok(())
}

/// The load phase against the keys held: keys loaded per second (left) and the process's RSS (right), per system.
pub fn load_and_rss(results: &[Result1], load_block: u64, path: &Path) -> Result<()> {
    let load_series = |y: &dyn Fn(&crate::Sample) -> f64| -> Series {
        results
            .iter()
            .map(|r| {
                let pts = r
                    .series
                    .iter()
                    .filter(|s| s.load)
                    .map(|s| ((s.version * load_block) as f64 / 1e6, y(s)))
                    .collect();
                (r.system.as_str(), pts)
            })
            .collect()
    };
    let rate = load_series(&|s| s.updates_per_sec / 1e3);
    let rss = load_series(&|s| s.rss_bytes as f64 / (1u64 << 30) as f64);
    let root = SVGBackend::new(path, (SIZE.0 * 2, SIZE.1)).into_drawing_area();
    let (left, right) = root.split_horizontally(SIZE.0);
    for (area, series, title, y_desc) in [
        (
            &left,
            rate,
            "Load: keys per second against keys held",
            "thousand keys/s (per load block)",
        ),
        (
            &right,
            rss,
            "Load: resident memory against keys held",
            "RSS, GiB",
        ),
    ] {
        let ((_, x_max), (_, y_max)) = extent(&series);
        let mut c = frame(area, title)?
            .build_cartesian_2d(0.0..x_max, 0.0..y_max * 1.1)
            .map_err(err)?;
        c.configure_mesh()
            .x_desc("million keys held")
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        draw_lines(&mut c, series, false, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Where a cache of 0 bytes is drawn on the logarithmic axis (percent of the store).
const NO_CACHE_AT: f64 = 0.01;

/// I/Os (read system calls) per get against the cache size as a percentage of the store size.
pub fn ios_per_get(results: &[Result1], path: &Path) -> Result<()> {
    let series: Series = results
        .iter()
        .filter(|r| !r.sweep.is_empty())
        .map(|r| {
            let pts = r
                .sweep
                .iter()
                .map(|p| ((p.fraction * 100.0).max(NO_CACHE_AT), p.ios_per_get))
                .collect();
            (r.system.as_str(), pts)
        })
        .collect();
    let ((_, x_max), (_, y_max)) = extent(&series);
    let (x_max, y_max) = (x_max * 1.5, y_max * 1.1);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let mut c = frame(
        &root,
        "I/Os per get against cache size (uniform random gets at the latest version)",
    )?
    .build_cartesian_2d((NO_CACHE_AT * 0.8..x_max).log_scale(), 0.0..y_max)
    .map_err(err)?;
    c.configure_mesh()
        .x_desc("cache size, % of the store on disk (log; no cache drawn at 0.01%)")
        .y_desc("read system calls per get")
        .x_label_formatter(&|v| format!("{v}%"))
        .draw()
        .map_err(err)?;
    draw_lines(&mut c, series, true, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)?;
    Ok(())
}
