//! `bench-report`: turns criterion's estimates into podlab's benchmark record.
//!
//! Reads `target/criterion/<group>/<bench>/new/estimates.json` for the groups named on the
//! command line, and writes `docs/benchmarks/<date>/<name>.{csv,md,svg}`: the median and
//! confidence interval of each row, its ratio to the baseline row measured in the same run, and
//! a bar chart. The machine (kernel, CPU, cores) and the date head the Markdown table.
//!
//! usage: bench-report NAME BASELINE GROUP... (e.g. `bench-report namespaces baseline/fork
//! baseline unshare clone setns pin`)

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

struct Row {
    id: String,
    median_ns: f64,
    low_ns: f64,
    high_ns: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, baseline, groups @ ..] = args.as_slice() else {
        eprintln!("usage: bench-report NAME BASELINE GROUP...");
        std::process::exit(2);
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let criterion = root.join("target/criterion");
    let rows: Vec<Row> = groups
        .iter()
        .flat_map(|g| read_group(&criterion.join(g), g))
        .collect();
    if rows.is_empty() {
        eprintln!(
            "no estimates under {}: run the benches first",
            criterion.display()
        );
        std::process::exit(1);
    }
    let base = rows.iter().find(|r| &r.id == baseline).map(|r| r.median_ns);
    let date = command_output("date", &["-u", "+%Y-%m-%d"]);
    let out = root.join("docs/benchmarks").join(&date);
    std::fs::create_dir_all(&out).expect("create docs/benchmarks/<date>");

    let mut csv = String::from("bench,median_ns,low_ns,high_ns,ratio_to_baseline\n");
    let mut md = format!("# {name}: {date}\n\n{}\n\n", machine());
    let _ = writeln!(md, "Ratios are to `{baseline}` measured in the same run.\n");
    md.push_str("| bench | median | 95% interval | ratio to baseline |\n|---|---:|---:|---:|\n");
    for row in &rows {
        let ratio = base.map(|b| row.median_ns / b);
        let ratio_text = ratio.map(|r| format!("{r:.2}")).unwrap_or_default();
        let _ = writeln!(
            csv,
            "{},{:.0},{:.0},{:.0},{}",
            row.id, row.median_ns, row.low_ns, row.high_ns, ratio_text
        );
        let _ = writeln!(
            md,
            "| `{}` | {} | {} – {} | {} |",
            row.id,
            human(row.median_ns),
            human(row.low_ns),
            human(row.high_ns),
            ratio_text
        );
    }
    let _ = writeln!(md, "\n![{name}]({name}.svg)");
    std::fs::write(out.join(format!("{name}.csv")), csv).expect("write csv");
    std::fs::write(out.join(format!("{name}.md")), md).expect("write md");
    plot(&rows, &out.join(format!("{name}.svg")), name);
    println!("wrote {}/{name}.{{csv,md,svg}}", out.display());
}

fn read_group(dir: &Path, group: &str) -> Vec<Row> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut benches: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("new/estimates.json").exists())
        .collect();
    benches.sort();
    benches
        .iter()
        .filter_map(|bench| {
            let text = std::fs::read_to_string(bench.join("new/estimates.json")).ok()?;
            let json: serde_json::Value = serde_json::from_str(&text).ok()?;
            let median = &json["median"];
            let bench_name = std::fs::read_to_string(bench.join("new/benchmark.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|j| j["function_id"].as_str().map(str::to_string))
                .unwrap_or_else(|| bench.file_name().unwrap().to_string_lossy().into_owned());
            Some(Row {
                id: format!("{group}/{bench_name}"),
                median_ns: median["point_estimate"].as_f64()?,
                low_ns: median["confidence_interval"]["lower_bound"].as_f64()?,
                high_ns: median["confidence_interval"]["upper_bound"].as_f64()?,
            })
        })
        .collect()
}

fn plot(rows: &[Row], path: &Path, title: &str) {
    let height = 60 + 28 * rows.len() as u32;
    let area = SVGBackend::new(path, (900, height)).into_drawing_area();
    area.fill(&WHITE).expect("fill");
    let max_us = rows.iter().map(|r| r.high_ns / 1000.0).fold(0.0, f64::max) * 1.1;
    let labels: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let mut chart = ChartBuilder::on(&area)
        .caption(format!("podlab {title} (median, µs)"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(220)
        .build_cartesian_2d(0.0..max_us, (0..rows.len()).into_segmented())
        .expect("chart");
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).map(|s| s.to_string()).unwrap_or_default(),
            _ => String::new(),
        })
        .y_labels(rows.len())
        .x_desc("µs")
        .draw()
        .expect("mesh");
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (r.median_ns / 1000.0, SegmentValue::Exact(i + 1)),
                ],
                BLUE.mix(0.6).filled(),
            )
        }))
        .expect("bars");
    area.present().expect("write svg");
}

fn human(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn machine() -> String {
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
    format!(
        "Machine: Linux {}, {cpu}, {cores} cores. podlab {}.",
        command_output("uname", &["-r"]),
        env!("CARGO_PKG_VERSION")
    )
}

fn command_output(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
