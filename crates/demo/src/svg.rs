//! Plots as hand-written SVG: panels in a grid, each with lines against a log2 message-size
//! axis, a linear (or log10) y axis, a legend and dashed reference lines (wire limits).

use std::fmt::Write;

/// One line of a panel: (bytes, value) points.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(u64, f64)>,
}

/// A dashed horizontal line with a label (a wire limit).
#[derive(Clone, Debug)]
pub struct Reference {
    pub label: String,
    pub value: f64,
}

#[derive(Clone, Debug)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
    pub references: Vec<Reference>,
}

#[derive(Clone, Debug)]
pub struct Plot {
    pub title: String,
    pub y_label: String,
    /// Log10 y axis (latency) instead of linear from zero.
    pub log_y: bool,
    pub panels: Vec<Panel>,
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const PANEL_W: f64 = 520.0;
const PANEL_H: f64 = 340.0;
const COLS: usize = 2;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 46.0;
const HEADER: f64 = 36.0;

/// Escapes text for SVG.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A size label for the x axis: 1, 4, 16, 64, 256, 1K, .. 4M.
fn size_label(bytes: u64) -> String {
    crate::results::fmt_size(bytes)
}

/// A round step for about `n` ticks over `0..max`.
fn nice_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_num(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// Renders the plot as a complete SVG document.
pub fn render(plot: &Plot) -> String {
    let rows = plot.panels.len().div_ceil(COLS).max(1);
    let width = PANEL_W * COLS as f64;
    let height = HEADER + PANEL_H * rows as f64;
    // Shared axes: every panel covers the same x range and the same y range.
    let all = || {
        plot.panels
            .iter()
            .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter()))
    };
    let xmin = all().map(|p| p.0.max(1)).min().unwrap_or(1);
    let xmax = all().map(|p| p.0.max(1)).max().unwrap_or(2).max(xmin * 2);
    let (lx0, lx1) = ((xmin as f64).log2().floor(), (xmax as f64).log2().ceil());
    let refs = plot
        .panels
        .iter()
        .flat_map(|p| p.references.iter().map(|r| r.value));
    let vmax = all().map(|p| p.1).chain(refs).fold(0.0f64, f64::max);
    let (y0, y1, yticks): (f64, f64, Vec<f64>) = if plot.log_y {
        let vmin = all()
            .map(|p| p.1)
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let lo = if vmin.is_finite() {
            vmin.log10().floor()
        } else {
            0.0
        };
        let hi = if vmax > 0.0 {
            vmax.log10().ceil().max(lo + 1.0)
        } else {
            lo + 1.0
        };
        let ticks = (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect();
        (lo, hi, ticks)
    } else {
        let step = nice_step(vmax.max(1e-9) * 1.05, 6.0);
        let top = (vmax * 1.05 / step).ceil().max(1.0) * step;
        let n = (top / step).round() as usize;
        (0.0, top, (0..=n).map(|i| i as f64 * step).collect())
    };
    let yval = |v: f64| if plot.log_y { v.max(1e-12).log10() } else { v };

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>
"#,
        width / 2.0,
        escape(&plot.title)
    );
    for (i, panel) in plot.panels.iter().enumerate() {
        let ox = PANEL_W * (i % COLS) as f64;
        let oy = HEADER + PANEL_H * (i / COLS) as f64;
        let (px0, px1) = (ox + LEFT, ox + PANEL_W - RIGHT);
        let (py0, py1) = (oy + PANEL_H - BOTTOM, oy + TOP);
        let x = |b: u64| px0 + ((b.max(1) as f64).log2() - lx0) / (lx1 - lx0) * (px1 - px0);
        let y = |v: f64| py0 - (yval(v) - y0) / (y1 - y0) * (py0 - py1);
        let _ = writeln!(
            s,
            r#"<g class="panel" data-title="{}">"#,
            escape(&panel.title)
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}</text>"#,
            (px0 + px1) / 2.0,
            oy + 20.0,
            escape(&panel.title)
        );
        // Grid and ticks.
        for t in &yticks {
            let ty = y(*t);
            let _ = writeln!(
                s,
                r##"<line x1="{px0:.1}" y1="{ty:.1}" x2="{px1:.1}" y2="{ty:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                px0 - 4.0,
                ty + 4.0,
                fmt_num(*t)
            );
        }
        let every = if lx1 - lx0 > 12.0 { 2 } else { 1 };
        for e in (lx0 as u32)..=(lx1 as u32) {
            let tx = x(1u64 << e);
            let _ = write!(
                s,
                r##"<line x1="{tx:.1}" y1="{py0:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#888"/>"##,
                py0 + 4.0
            );
            if (e - lx0 as u32).is_multiple_of(every) {
                let _ = write!(
                    s,
                    r#"<text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    py0 + 16.0,
                    size_label(1u64 << e)
                );
            }
            s.push('\n');
        }
        let _ = writeln!(
            s,
            r##"<rect x="{px0:.1}" y="{py1:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
            px1 - px0,
            py0 - py1
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">message size (bytes, log2)</text>"#,
            (px0 + px1) / 2.0,
            py0 + 34.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            ox + 16.0,
            (py0 + py1) / 2.0,
            escape(&plot.y_label)
        );
        // Reference lines.
        for r in &panel.references {
            let ry = y(r.value);
            let _ = writeln!(
                s,
                r##"<line class="reference" x1="{px0:.1}" y1="{ry:.1}" x2="{px1:.1}" y2="{ry:.1}" stroke="#777" stroke-dasharray="5,4"/><text x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
                px0 + 4.0,
                ry - 3.0,
                escape(&r.label)
            );
        }
        // Series and legend.
        for (k, series) in panel.series.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let pts: Vec<String> = series
                .points
                .iter()
                .filter(|p| !plot.log_y || p.1 > 0.0)
                .map(|&(b, v)| format!("{:.1},{:.1}", x(b), y(v)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline class="series" data-label="{}" points="{}" fill="none" stroke="{color}" stroke-width="1.8"/>"#,
                escape(&series.label),
                pts.join(" ")
            );
            let ly = py1 + 14.0 + 15.0 * k as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2.5"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                px0 + 10.0,
                ly - 4.0,
                px0 + 28.0,
                ly - 4.0,
                px0 + 33.0,
                ly,
                escape(&series.label)
            );
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(log_y: bool) -> Plot {
        let series = |label: &str, scale: f64| Series {
            label: label.into(),
            points: (0..=22)
                .map(|e| (1u64 << e, scale * (e as f64 + 1.0)))
                .collect(),
        };
        Plot {
            title: "bw <policy> & rails".into(),
            y_label: "MB/s".into(),
            log_y,
            panels: vec![
                Panel {
                    title: "adaptive".into(),
                    series: vec![
                        series("1 rail", 5.0),
                        series("2 rails", 10.0),
                        series("4 rails", 20.0),
                    ],
                    references: vec![Reference {
                        label: "4 x 119.5".into(),
                        value: 478.0,
                    }],
                },
                Panel {
                    title: "bind".into(),
                    series: vec![series("1 rail", 5.0)],
                    references: vec![],
                },
            ],
        }
    }

    /// Every `<tag ...>` is closed (`/>` or a matching `</tag>`), in order.
    fn balanced(svg: &str) -> bool {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let end = rest.find('>').expect("unterminated tag");
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name.trim()) {
                    return false;
                }
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
        }
        stack.is_empty()
    }

    #[test]
    fn renders_valid_looking_svg_with_every_series() {
        let svg = render(&plot(false));
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(balanced(&svg), "{svg}");
        assert_eq!(svg.matches("<polyline class=\"series\"").count(), 4);
        assert_eq!(svg.matches("data-label=\"1 rail\"").count(), 2);
        assert_eq!(svg.matches("data-label=\"4 rails\"").count(), 1);
        assert_eq!(svg.matches("class=\"panel\"").count(), 2);
        assert_eq!(svg.matches("class=\"reference\"").count(), 1);
        // Title escaped, x axis labelled in powers of two up to 4M.
        assert!(svg.contains("bw &lt;policy&gt; &amp; rails"));
        assert!(svg.contains(">4M</text>") && svg.contains(">1K</text>"));
        // Each polyline has one point per size, all inside the drawing.
        for line in svg.lines().filter(|l| l.contains("<polyline")) {
            let pts = line
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            assert_eq!(pts.split(' ').count(), 23);
            for p in pts.split(' ') {
                let (x, y) = p.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!(
                    (0.0..=1040.0).contains(&x) && (0.0..=716.0).contains(&y),
                    "{p}"
                );
            }
        }
    }

    #[test]
    fn log_y_axis_has_decade_ticks() {
        let svg = render(&plot(true));
        assert!(balanced(&svg));
        assert!(svg.contains(">1000</text>") && svg.contains(">1</text>"));
    }

    #[test]
    fn empty_plot_is_still_a_document() {
        let svg = render(&Plot {
            title: "none".into(),
            y_label: "y".into(),
            log_y: false,
            panels: vec![],
        });
        assert!(balanced(&svg));
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(478.0, 6.0), 100.0);
        assert_eq!(nice_step(1000.0, 6.0), 200.0);
        assert_eq!(nice_step(12.0, 6.0), 2.0);
    }
}
