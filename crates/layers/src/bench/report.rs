//! The record of one run: `peers.csv` (every row), `peers.md` (the machine, the versions, the
//! host check, one table per comparison with podlab/peer ratios) and the plots `peers-*.svg`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::record::{to_csv, Row};
use crate::{Error, Result};

/// What heads the Markdown: when, where, what with.
pub struct Header {
    pub date: String,
    pub plan: String,
    pub machine: String,
    pub versions: Vec<(String, String)>,
    pub seconds: f64,
    /// The host check in words (one line each).
    pub host_check: Vec<String>,
    pub notes: Vec<String>,
}

const COMPARISONS: &[(&str, &str, &str)] = &[
    (
        "ns-set",
        "1. A namespace set (uts+ipc+net+pid+mnt) around /bin/true",
        "One command line each, spawned and waited for: what creating a pod's namespaces costs a \
         caller that runs a program in them.",
    ),
    (
        "container-true",
        "2. One container running /bin/true: created, run, removed",
        "From the command's start to its exit, the container gone. runc and crun on the same \
         bundle folder; ctr, docker and podman on the same busybox image.",
    ),
    (
        "pod",
        "3. A pod: sandbox + two containers up, then deleted",
        "`up`: from the first command to the last container running; `down`: deleting all of it. \
         Networking: `--network none` rows have the loopback of the pod's own network namespace; \
         `bridge` rows also get a veth on a host-only bridge with an address from host-local IPAM \
         (podman: a CNI `bridge` conflist with no gateway and no masquerade; docker: an \
         `--internal` bridge network), both inside the lab's network namespace.",
    ),
    (
        "scale",
        "4. Scale: pods alive, one more, and the memory each pod adds",
        "At each level, the time to start one more pod (and to remove it again), and the Pss/RSS \
         of the processes that each pod keeps alive (podman: conmon + catatonit; docker and ctr: \
         containerd-shim-runc-v2 + the sandbox process), summed and divided by the pods alive.",
    ),
    (
        "teardown",
        "5. Teardown: delete N pods, and the kernel freeing their network namespaces",
        "`delete_all`: the deletions, one command per pod; `netns_freed`: from the first deletion \
         until the kernel's count of `net_namespace` objects is back where it was before the pods \
         were made (the kernel frees them asynchronously); `netns_lag`: how much of that came after the \
         last deletion returned; – when the count was not back within the wait (15 s quick, \
         90 s full: dockerd's libnetwork removes its namespace pins in a garbage collection once \
         a minute).",
    ),
];

/// Writes `PREFIX.csv`, `PREFIX.md` and the plots `PREFIX-*.svg` into `dir` (the prefix is
/// `peers` for a full run, `peers-quick` for a quick one).
pub fn write(dir: &Path, prefix: &str, header: &Header, rows: &[Row]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    let csv = dir.join(format!("{prefix}.csv"));
    std::fs::write(&csv, to_csv(rows)).map_err(|e| Error::io("writing", &csv, e))?;
    let plots = plot_all(dir, prefix, rows)?;
    let md = dir.join(format!("{prefix}.md"));
    let text = markdown(header, rows, &plots).replace(
        "[peers.csv](peers.csv)",
        &format!("[{prefix}.csv]({prefix}.csv)"),
    );
    std::fs::write(&md, text).map_err(|e| Error::io("writing", &md, e))
}

/// The Markdown record.
pub fn markdown(header: &Header, rows: &[Row], plots: &[(String, String)]) -> String {
    let mut md = format!(
        "# podlab vs the real peers: {} ({} run)\n\n{}\n\nThe run took {:.0} s. Every figure is \
         from this one run, interleaved (A B C, B C A, ...) after a warm-up; ratios are \
         podlab's median / the peer's median of the same row.\n\n",
        header.date, header.plan, header.machine, header.seconds
    );
    md.push_str("| program | version |\n|---|---|\n");
    for (program, version) in &header.versions {
        let _ = writeln!(md, "| `{program}` | {version} |");
    }
    md.push_str("\n**Host check** (before the lab vs after its teardown):\n\n");
    for line in &header.host_check {
        let _ = writeln!(md, "- {line}");
    }
    if !header.notes.is_empty() {
        md.push_str("\n**Notes from the run:**\n\n");
        for line in &header.notes {
            let _ = writeln!(md, "- {line}");
        }
    }
    for (comparison, title, what) in COMPARISONS {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.comparison == *comparison)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let _ = write!(md, "\n## {title}\n\n{what}\n\n");
        md.push_str(
            "| subject | metric | level | median | min | max | n | podlab / peer | status |\n",
        );
        md.push_str("|---|---|---:|---:|---:|---:|---:|---:|---|\n");
        for r in mine.iter().filter(|r| r.status != "pending") {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.subject,
                r.metric,
                r.level.map(|l| l.to_string()).unwrap_or_default(),
                value(r.median, &r.unit),
                value(r.min, &r.unit),
                value(r.max, &r.unit),
                r.n,
                r.podlab_ratio
                    .map(|v| format!("{v:.3}"))
                    .unwrap_or_default(),
                status_cell(r),
            );
        }
        let pending: BTreeSet<&str> = mine
            .iter()
            .filter(|r| r.status == "pending")
            .map(|r| r.command.as_str())
            .collect();
        for command in pending {
            let _ = writeln!(md, "\npodlab: pending, will run `{command}`.");
        }
        for (plot_comparison, file) in plots {
            if plot_comparison == comparison {
                let _ = writeln!(md, "\n![{comparison}]({file})");
            }
        }
    }
    let pending: BTreeSet<(String, String)> = rows
        .iter()
        .filter(|r| r.status == "pending")
        .map(|r| (r.comparison.clone(), r.command.clone()))
        .collect();
    if !pending.is_empty() {
        md.push_str("\n## Pending podlab rows\n\nThese podlab commands do not exist yet; each row \
                     will run the command shown as soon as it does.\n\n| comparison | command |\n|---|---|\n");
        for (comparison, command) in pending {
            let _ = writeln!(md, "| {comparison} | `{command}` |");
        }
    }
    md.push_str("\nRaw figures: [peers.csv](peers.csv).\n");
    md
}

fn status_cell(r: &Row) -> String {
    if r.status == "pending" {
        "pending".into()
    } else if r.status.starts_with("failed") {
        let mut s: String = r.status.chars().take(120).collect();
        s = s.replace('|', "/");
        s
    } else {
        String::new()
    }
}

fn value(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.is_nan() => "–".into(),
        Some(v) => match unit {
            "ms" if v < 10.0 => format!("{v:.2} ms"),
            "ms" => format!("{v:.1} ms"),
            "kB" => format!("{v:.0} kB"),
            "count" => format!("{v:.2}"),
            other => format!("{v:.2} {other}"),
        },
    }
}

/// Draws every plot; returns (comparison, file name) of each.
pub fn plot_all(dir: &Path, prefix: &str, rows: &[Row]) -> Result<Vec<(String, String)>> {
    let mut made = Vec::new();
    for (comparison, metric, title) in [
        (
            "ns-set",
            "total",
            "namespace set around /bin/true (median, ms)",
        ),
        (
            "container-true",
            "total",
            "/bin/true container, created, run, removed (median, ms)",
        ),
        (
            "pod",
            "total",
            "pod of two containers, up then deleted (median, ms)",
        ),
    ] {
        let bars: Vec<Bar> = rows
            .iter()
            .filter(|r| r.comparison == comparison && r.metric == metric)
            .filter_map(Bar::of)
            .collect();
        if bars.is_empty() {
            continue;
        }
        let file = format!("{prefix}-{comparison}.svg");
        bar_chart(&dir.join(&file), title, &bars)?;
        made.push((comparison.to_string(), file));
    }
    let teardown: Vec<Bar> = rows
        .iter()
        .filter(|r| {
            r.comparison == "teardown" && (r.metric == "delete_all" || r.metric == "netns_freed")
        })
        .filter_map(|r| {
            Bar::of(r).map(|mut b| {
                b.label = format!("{}: {}", r.subject, r.metric);
                b
            })
        })
        .collect();
    if !teardown.is_empty() {
        let file = format!("{prefix}-teardown.svg");
        bar_chart(&dir.join(&file), "teardown of N pods (ms)", &teardown)?;
        made.push(("teardown".into(), file));
    }
    for (metric, title, file) in [
        (
            "start_one_more",
            "starting one more pod (median, ms) vs pods alive",
            "scale-start",
        ),
        (
            "pss_per_pod",
            "memory per pod (Pss, kB) vs pods alive",
            "scale-memory",
        ),
    ] {
        let series = scale_series(rows, metric);
        if series.iter().any(|(_, points)| !points.is_empty()) {
            let file = format!("{prefix}-{file}.svg");
            line_chart(&dir.join(&file), title, &series)?;
            made.push(("scale".into(), file));
        }
    }
    Ok(made)
}

struct Bar {
    label: String,
    median: f64,
    min: f64,
    max: f64,
    podlab: bool,
}

impl Bar {
    fn of(r: &Row) -> Option<Bar> {
        let median = r.median.filter(|v| v.is_finite())?;
        Some(Bar {
            label: r.subject.clone(),
            median,
            min: r.min.unwrap_or(median),
            max: r.max.unwrap_or(median),
            podlab: r.is_podlab(),
        })
    }
}

fn plot_error(path: &Path, err: impl std::fmt::Display) -> Error {
    Error::io("drawing", path, std::io::Error::other(err.to_string()))
}

/// Horizontal bars of the medians, with a line from min to max.
fn bar_chart(path: &Path, title: &str, bars: &[Bar]) -> Result<()> {
    let height = 70 + 30 * bars.len() as u32;
    let area = SVGBackend::new(path, (960, height)).into_drawing_area();
    area.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let top = bars.iter().map(|b| b.max).fold(0.0, f64::max).max(1e-3) * 1.08;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let mut chart = ChartBuilder::on(&area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(260)
        .build_cartesian_2d(0.0..top, (0..bars.len()).into_segmented())
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("ms (bar: median; line: min to max)")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let color = if b.podlab {
                RED.mix(0.6)
            } else {
                BLUE.mix(0.5)
            };
            Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (b.median, SegmentValue::Exact(i + 1)),
                ],
                color.filled(),
            )
        }))
        .map_err(|e| plot_error(path, e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            PathElement::new(
                vec![
                    (b.min, SegmentValue::CenterOf(i)),
                    (b.max, SegmentValue::CenterOf(i)),
                ],
                BLACK.stroke_width(2),
            )
        }))
        .map_err(|e| plot_error(path, e))?;
    area.present().map_err(|e| plot_error(path, e))
}

/// Per subject: (pods alive, value) of one scale metric.
fn scale_series(rows: &[Row], metric: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut subjects: Vec<String> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.comparison == "scale" && r.metric == metric)
    {
        if !subjects.contains(&r.subject) {
            subjects.push(r.subject.clone());
        }
    }
    subjects
        .into_iter()
        .map(|s| {
            let points = rows
                .iter()
                .filter(|r| r.comparison == "scale" && r.metric == metric && r.subject == s)
                .filter_map(|r| Some((f64::from(r.level?), r.median.filter(|v| v.is_finite())?)))
                .collect();
            (s, points)
        })
        .collect()
}

fn line_chart(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<()> {
    let area = SVGBackend::new(path, (960, 480)).into_drawing_area();
    area.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut max_x, mut max_y) = (1.0f64, 0.0f64);
    for (x, y) in all {
        max_x = max_x.max(*x);
        max_y = max_y.max(*y);
    }
    let mut chart = ChartBuilder::on(&area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..max_x * 1.5).log_scale(), 0.0..max_y.max(1e-3) * 1.15)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("pods alive (log scale)")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let palette = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (name, points)) in series.iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let color = palette[i % palette.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| plot_error(path, e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
            .map_err(|e| plot_error(path, e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| plot_error(path, e))?;
    area.present().map_err(|e| plot_error(path, e))
}

/// `Linux 6.18.44, Intel Xeon ..., 2 cores` of this machine.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kb| format!(", {:.0} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!("Machine: Linux {kernel} ({os}), {cpu}, {cores} cores{memory}.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        comparison: &str,
        subject: &str,
        metric: &str,
        level: Option<u32>,
        median: Option<f64>,
    ) -> Row {
        Row {
            comparison: comparison.into(),
            subject: subject.into(),
            metric: metric.into(),
            level,
            unit: "ms".into(),
            n: 3,
            median,
            min: median.map(|m| m * 0.9),
            max: median.map(|m| m * 1.2),
            podlab_ratio: None,
            status: if median.is_some() {
                "measured"
            } else {
                "pending"
            }
            .into(),
            command: format!("{subject} cmd"),
        }
    }

    #[test]
    fn markdown_and_plots() {
        let rows = vec![
            row("container-true", "podlab", "total", None, None),
            row("container-true", "runc", "total", None, Some(20.0)),
            row(
                "container-true",
                "docker run --rm",
                "total",
                None,
                Some(200.0),
            ),
            row(
                "scale",
                "podman pod",
                "start_one_more",
                Some(1),
                Some(300.0),
            ),
            row(
                "scale",
                "podman pod",
                "start_one_more",
                Some(10),
                Some(320.0),
            ),
            row("scale", "podman pod", "pss_per_pod", Some(10), Some(3000.0)),
        ];
        let dir = std::env::temp_dir().join(format!("podlab-peers-report-{}", std::process::id()));
        let header = Header {
            date: "2026-12-02".into(),
            plan: "quick".into(),
            machine: machine(),
            versions: vec![("runc".into(), "runc version 1.1.5".into())],
            seconds: 12.0,
            host_check: vec!["unchanged".into()],
            notes: vec![],
        };
        write(&dir, "peers", &header, &rows).unwrap();
        let md = std::fs::read_to_string(dir.join("peers.md")).unwrap();
        assert!(md.contains("| runc | total |  | 20.0 ms |"), "{md}");
        assert!(md.contains("## Pending podlab rows"));
        assert!(md.contains("`podlab cmd`"));
        assert!(md.contains("![container-true](peers-container-true.svg)"));
        for file in [
            "peers-container-true.svg",
            "peers-scale-start.svg",
            "peers-scale-memory.svg",
            "peers.csv",
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            assert!(!text.is_empty(), "{file} is empty");
        }
        assert!(
            std::fs::read_to_string(dir.join("peers-container-true.svg"))
                .unwrap()
                .contains("<svg")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
