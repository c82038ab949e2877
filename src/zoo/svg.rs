//! Small inline SVG charts for the reports: a grouped horizontal bar chart, a line chart of
//! live bytes per step, and an arena layout (offset × step rectangles, like memviz).
//!
//! No external resource (no fonts, scripts or links), no `xmlns` URL: the SVG is meant to be
//! inlined in HTML5. Big inputs are reduced so a chart stays small: line charts keep at most
//! [`MAX_POINTS`] points (the maximum of each bucket of steps, so peaks survive), layouts at
//! most [`MAX_RECTS`] rectangles (the largest by area; the rest is counted in a caption).

use super::profile::Block;
use std::fmt::Write;

/// Most points per line in a line chart.
pub const MAX_POINTS: usize = 400;
/// Most rectangles in a layout picture.
pub const MAX_RECTS: usize = 600;

/// Escapes text for XML/HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Bytes in MiB with two decimals.
pub fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

/// One series of a bar chart: name and fill colour.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// CSS colour.
    pub color: &'a str,
}

/// A grouped horizontal bar chart: one group per row, one bar per series; values in percent
/// (0–100 and a little beyond are drawn to scale, the axis ends at the largest value).
pub fn bar_chart(title: &str, series: &[Series], rows: &[(String, Vec<f64>)]) -> String {
    let (label_w, plot_w, bar_h, gap) = (220.0, 520.0, 7.0, 6.0);
    let group_h = bar_h * series.len() as f64 + gap;
    let top = 40.0;
    let height = top + group_h * rows.len() as f64 + 30.0;
    let width = label_w + plot_w + 60.0;
    let max = rows
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(100.0f64, f64::max);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" font-family="sans-serif" font-size="11"><title>{}</title>"#,
        esc(title)
    );
    let mut x = label_w;
    for se in series {
        let _ = write!(
            s,
            r#"<rect x="{x}" y="8" width="10" height="10" fill="{}"/><text x="{}" y="17">{}</text>"#,
            se.color,
            x + 14.0,
            esc(se.name)
        );
        x += 30.0 + 7.0 * se.name.len() as f64;
    }
    for pct in [0.0, 25.0, 50.0, 75.0, 100.0] {
        let gx = label_w + plot_w * pct / max;
        let _ = write!(
            s,
            r##"<line x1="{gx:.1}" y1="{}" x2="{gx:.1}" y2="{}" stroke="#ccc"/><text x="{gx:.1}" y="{}" text-anchor="middle">{pct}%</text>"##,
            top - 4.0,
            height - 26.0,
            height - 12.0
        );
    }
    for (r, (label, values)) in rows.iter().enumerate() {
        let y0 = top + group_h * r as f64;
        let _ = write!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            label_w - 6.0,
            y0 + group_h / 2.0,
            esc(label)
        );
        for (k, (v, se)) in values.iter().zip(series).enumerate() {
            let w = (plot_w * v / max).max(0.0);
            let _ = write!(
                s,
                r#"<rect x="{label_w}" y="{:.1}" width="{w:.1}" height="{bar_h}" fill="{}"><title>{}: {} {v:.1}%</title></rect>"#,
                y0 + bar_h * k as f64,
                se.color,
                esc(label),
                esc(se.name)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// Reduces `values` to at most `n` points, each the maximum of its bucket: (x, y) pairs with
/// x the bucket's first index.
pub fn downsample(values: &[u64], n: usize) -> Vec<(usize, u64)> {
    if values.len() <= n || n == 0 {
        return values.iter().copied().enumerate().collect();
    }
    let bucket = values.len().div_ceil(n);
    values
        .chunks(bucket)
        .enumerate()
        .map(|(i, c)| (i * bucket, c.iter().copied().max().unwrap_or(0)))
        .collect()
}

/// Line chart of bytes per step: one line per series (name, colour, values).
pub fn timeline(title: &str, lines: &[(&str, &str, &[u64])]) -> String {
    let (left, w, h, top) = (70.0, 640.0, 200.0, 24.0);
    let width = left + w + 20.0;
    let height = top + h + 36.0;
    let steps = lines.iter().map(|l| l.2.len()).max().unwrap_or(1).max(2);
    let ymax = lines
        .iter()
        .flat_map(|l| l.2.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" font-family="sans-serif" font-size="11"><title>{}</title><rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##,
        esc(title)
    );
    for k in 0..=4 {
        let v = ymax as f64 * k as f64 / 4.0;
        let y = top + h - h * k as f64 / 4.0;
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + w,
            left - 4.0,
            y + 4.0,
            mib(v as u64)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">step (op executed), 0–{}</text>"#,
        left + w / 2.0,
        height - 6.0,
        steps - 1
    );
    let mut lx = left;
    for (name, color, values) in lines {
        let pts: Vec<String> = downsample(values, MAX_POINTS)
            .into_iter()
            .map(|(i, v)| {
                format!(
                    "{:.1},{:.1}",
                    left + w * i as f64 / (steps - 1) as f64,
                    top + h - h * v as f64 / ymax as f64
                )
            })
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/><rect x="{lx}" y="6" width="10" height="10" fill="{color}"/><text x="{}" y="15">{}</text>"#,
            pts.join(" "),
            lx + 14.0,
            esc(name)
        );
        lx += 40.0 + 7.0 * name.len() as f64;
    }
    s.push_str("</svg>");
    s
}

/// Arena layout: each block a rectangle, x = steps, y = offset (0 at the bottom).
pub fn layout(title: &str, blocks: &[Block], steps: usize, peak: u64) -> String {
    let (left, w, h, top) = (70.0, 640.0, 240.0, 10.0);
    let width = left + w + 20.0;
    let height = top + h + 36.0;
    let steps = steps.max(1);
    let peak = peak.max(1);
    let area = |b: &Block| b.size as f64 * (b.end - b.start + 1) as f64;
    let mut shown: Vec<(usize, &Block)> = blocks.iter().enumerate().collect();
    let omitted = shown.len().saturating_sub(MAX_RECTS);
    if omitted > 0 {
        shown.sort_by(|a, b| area(b.1).total_cmp(&area(a.1)).then(a.0.cmp(&b.0)));
        shown.truncate(MAX_RECTS);
        shown.sort_by_key(|&(i, _)| i);
    }
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" font-family="sans-serif" font-size="11"><title>{}</title><rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#999"/>"##,
        esc(title)
    );
    for k in 0..=4 {
        let y = top + h - h * k as f64 / 4.0;
        let _ = write!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 4.0,
            y + 4.0,
            mib(peak * k / 4)
        );
    }
    for (i, b) in shown {
        let x = left + w * b.start as f64 / steps as f64;
        let bw = (w * (b.end - b.start + 1) as f64 / steps as f64).max(0.5);
        let bh = (h * b.size as f64 / peak as f64).max(0.5);
        let y = top + h - h * (b.offset + b.size) as f64 / peak as f64;
        let hue = (i as f64 * 137.508) % 360.0;
        let _ = write!(
            s,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{bh:.1}" fill="hsl({hue:.0},55%,60%)"><title>{} {} @{} steps {}–{}</title></rect>"#,
            esc(&b.name),
            mib(b.size),
            b.offset,
            b.start,
            b.end
        );
    }
    let caption = if omitted > 0 {
        format!("step; offset (bytes) up; {omitted} smallest blocks not drawn")
    } else {
        "step; offset (bytes) up".to_string()
    };
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></svg>"#,
        left + w / 2.0,
        height - 6.0,
        esc(&caption)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_the_maximum_of_each_bucket() {
        let v: Vec<u64> = (0..1000).map(|i| if i == 777 { 5000 } else { i }).collect();
        let d = downsample(&v, 100);
        assert!(d.len() <= 100);
        assert_eq!(d.iter().map(|p| p.1).max(), Some(5000));
    }

    #[test]
    fn layouts_of_many_blocks_are_capped_and_say_so() {
        let blocks: Vec<Block> = (0..MAX_RECTS + 10)
            .map(|i| Block {
                name: format!("t{i}"),
                offset: 0,
                size: 1 + i as u64,
                start: i,
                end: i,
            })
            .collect();
        let svg = layout("x", &blocks, blocks.len(), 10_000);
        assert_eq!(svg.matches("<rect").count(), MAX_RECTS + 1);
        assert!(svg.contains("10 smallest blocks not drawn"));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }
}
