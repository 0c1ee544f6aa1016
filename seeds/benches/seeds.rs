//! The seeds, rebuilt: each workload's variants at 1, 2 and 4 threads
//! (threads are CPUs through ksync's `test-hooks` kernel, thread `i`
//! pinned to core `i % cores`), operations per second, the after/before
//! ratios and the seed's published figure; the `mmap_sem` writer's cost at
//! this build's `MAX_CPUS`; an SVG plot per workload.
//!
//! Every measurement runs for a fixed time (`KSYNC_BENCH_MS`, default 200),
//! variants are interleaved (order rotated) within each of
//! `KSYNC_BENCH_REPS` (default 5) repetitions, cells are medians with
//! min-max, and ratios are medians of per-repetition ratios. Every run's
//! consistency check must pass.
//!
//! * `--quick`: 30 ms x 1 rep, results checked, timings not judged, no
//!   plots written.
//! * `--writer`: only the writer-cost line (run once per `KSYNC_MAX_CPUS`
//!   build: 8, 64, 256).
//! * Plots go to `seeds/plots/` (or `KSYNC_SEEDS_PLOTS`).
//!
//! Run: `cargo bench -p seeds --bench seeds [-- --quick | --writer]`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ksync::kernel::MAX_CPUS;
use ksync::rcu;
use seeds::Workload;
use seeds::fd::FdLookup;
use seeds::fget_light::FgetLight;
use seeds::mmap::{IO_EVERY, IO_US, MmapSem, MmapSleep, MmapVariant};
use seeds::stat::StatStorm;
use seeds::walk::PathWalk;

const THREADS: [usize; 3] = [1, 2, 4];

static FD: FdLookup = FdLookup::new();
static LIGHT: FgetLight = FgetLight::new();
static STAT: StatStorm = StatStorm::new();
static WALK: PathWalk = PathWalk::new();
static MMAP: MmapSem = MmapSem::new();
static MMAP_SLEEP: MmapSleep = MmapSleep::new();

/// A measurement in which a worker had less than this share of its CPU
/// (of the elapsed time; of its fair share when threads outnumber cores)
/// was disturbed by other load.
const MIN_CPU_SHARE: f64 = 0.9;

/// One workload's measurements: `ops[variant][threads][rep]` (ops/s).
struct Measured {
    name: &'static str,
    labels: Vec<&'static str>,
    ops: Vec<Vec<Vec<f64>>>,
    /// Lowest worker CPU share of each measurement, same shape.
    share: Vec<Vec<Vec<f64>>>,
}

/// An after/before pair (indices into the measured variants) with the
/// seed's figure.
struct Report {
    pairs: &'static [(usize, usize)],
    seed: &'static str,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn summary(v: &[f64], scale: f64, prec: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min) / scale;
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max) / scale;
    let m = median(v) / scale;
    if v.len() == 1 {
        format!("{m:.prec$}")
    } else {
        format!("{m:.prec$} ({lo:.prec$}-{hi:.prec$})")
    }
}

/// Per-rep ratios `a / b` of ops/s.
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// Measures every variant but the control.
fn measure<W: Workload>(w: &'static W, dur: Duration, reps: usize) -> Measured {
    let variants: Vec<_> = W::VARIANTS
        .iter()
        .filter(|(v, _)| *v != W::CONTROL)
        .collect();
    let mut ops = vec![vec![Vec::new(); THREADS.len()]; variants.len()];
    let mut share = ops.clone();
    for rep in 0..reps {
        for (ti, &threads) in THREADS.iter().enumerate() {
            for j in 0..variants.len() {
                let vi = (j + rep) % variants.len();
                let (variant, label) = *variants[vi];
                let r = common::run(w, variant, W::BENCH, threads, dur, true);
                if let Err(v) = &r.check {
                    panic!(
                        "{}: {label} at {threads} threads failed its check: {v}",
                        W::NAME
                    );
                }
                ops[vi][ti].push(r.ops_per_sec());
                share[vi][ti].push(r.cpu_share.unwrap_or(1.0));
            }
        }
    }
    Measured {
        name: W::NAME,
        labels: variants.iter().map(|(_, l)| *l).collect(),
        ops,
        share,
    }
}

fn print_table(m: &Measured, report: &Report) {
    println!("\n## {}\n", m.name);
    let mut head = String::from("| threads |");
    let mut rule = String::from("|---|");
    for l in &m.labels {
        let _ = write!(head, " {l} |");
        rule.push_str("---|");
    }
    for &(a, b) in report.pairs {
        let _ = write!(head, " {} / {} |", m.labels[a], m.labels[b]);
        rule.push_str("---|");
    }
    head.push_str(" seed |");
    rule.push_str("---|");
    println!("Mops/s, all threads together, median (min-max).\n\n{head}\n{rule}");
    for (ti, &threads) in THREADS.iter().enumerate() {
        let mut row = format!("| {threads} |");
        for v in &m.ops {
            let _ = write!(row, " {} |", summary(&v[ti], 1e6, 2));
        }
        for &(a, b) in report.pairs {
            let r = ratios(&m.ops[a][ti], &m.ops[b][ti]);
            let _ = write!(row, " {}x |", summary(&r, 1.0, 2));
        }
        let seed = if ti == 0 { report.seed } else { "" };
        let _ = write!(row, " {seed} |");
        println!("{row}");
    }
    let mut low = String::new();
    for (l, v) in m.labels.iter().zip(&m.share) {
        let lows: Vec<String> = THREADS
            .iter()
            .zip(v)
            .map(|(t, s)| {
                let min = s.iter().copied().fold(f64::INFINITY, f64::min);
                let n = s.iter().filter(|&&x| x < MIN_CPU_SHARE).count();
                format!("{t}: {min:.2} ({n})")
            })
            .collect();
        let _ = write!(low, "\n- {l}: {}", lows.join(", "));
    }
    println!(
        "\nLoad check, lowest worker CPU share per thread count (measurements below \
         {MIN_CPU_SHARE}):{low}"
    );
}

/// The median ratio `a / b` at `threads`.
fn ratio_at(m: &Measured, a: usize, b: usize, threads: usize) -> f64 {
    let ti = THREADS.iter().position(|&t| t == threads).unwrap();
    median(&ratios(&m.ops[a][ti], &m.ops[b][ti]))
}

// ---- the writer's cost ------------------------------------------------------

const WRITERS: [(MmapVariant, &str); 6] = [
    (MmapVariant::Percpu, "PerCpuRwLock"),
    (MmapVariant::Gated, "GatedPerCpuRwLock"),
    (MmapVariant::SpinRwLock, "spin::RwLock"),
    (MmapVariant::Rwsem, "ticket-lock rwsem"),
    (MmapVariant::PercpuRwsem, "PerCpuRwSemaphore"),
    (MmapVariant::RwSemaphore, "RwSemaphore"),
];

/// ns per empty write section, one thread, no readers: (median, min) over
/// reps (the minimum is the figure least disturbed by other load).
fn writer_cost(dur: Duration, reps: usize) -> Vec<(f64, f64)> {
    MMAP.setup(MmapVariant::Percpu, MmapSem::BENCH);
    std::thread::scope(|s| {
        s.spawn(|| {
            rcu::cpu_online();
            let mut ns = vec![Vec::new(); WRITERS.len()];
            for _ in 0..reps {
                for (k, &(v, _)) in WRITERS.iter().enumerate() {
                    let (t0, mut n) = (Instant::now(), 0u64);
                    while t0.elapsed() < dur {
                        for _ in 0..64 {
                            MMAP.write_cycle(v);
                        }
                        n += 64;
                        rcu::quiescent_state();
                    }
                    ns[k].push(t0.elapsed().as_nanos() as f64 / n as f64);
                }
            }
            rcu::cpu_offline();
            ns.iter()
                .map(|v| (median(v), v.iter().copied().fold(f64::INFINITY, f64::min)))
                .collect()
        })
        .join()
        .unwrap()
    })
}

fn print_writer(ns: &[(f64, f64)]) {
    let cells: Vec<String> = WRITERS
        .iter()
        .zip(ns)
        .map(|((_, l), (m, lo))| format!("{l} {m:.1} ns (min {lo:.1})"))
        .collect();
    println!("writer-cost MAX_CPUS={MAX_CPUS}: {}", cells.join(", "));
}

// ---- plots ------------------------------------------------------------------

const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Throughput against threads, one line per variant, as a small SVG.
fn svg(m: &Measured, note: &str) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 400.0, 70.0, 220.0, 40.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let ymax = m
        .ops
        .iter()
        .flat_map(|v| v.iter().map(|r| median(r)))
        .fold(0.0, f64::max)
        / 1e6;
    let step = nice_step(ymax / 5.0);
    let ytop = (ymax / step).ceil().max(1.0) * step;
    let x = |ti: usize| left + pw * ti as f64 / (THREADS.len() - 1) as f64;
    let y = |v: f64| top + ph * (1.0 - v / ytop);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"20\" font-size=\"15\">{}</text>\n\
         <text x=\"{left}\" y=\"34\" font-size=\"10\" fill=\"#555\">host: {note}</text>\n",
        m.name
    );
    let mut v = 0.0;
    while v <= ytop + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v:.prec$}</text>",
            left + pw,
            left - 6.0,
            yy + 4.0,
            prec = if step < 1.0 { 1 } else { 0 }
        );
        v += step;
    }
    for (ti, t) in THREADS.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t}</text>",
            x(ti),
            top + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">threads (CPUs)</text>\n\
         <text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">Mops/s (all threads)</text>\n\
         <rect x=\"{left}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#444\"/>",
        left + pw / 2.0,
        h - 12.0,
        top + ph / 2.0,
        top + ph / 2.0
    );
    for (k, (label, runs)) in m.labels.iter().zip(&m.ops).enumerate() {
        let c = COLOURS[k % COLOURS.len()];
        let pts: Vec<String> = runs
            .iter()
            .enumerate()
            .map(|(ti, r)| format!("{:.1},{:.1}", x(ti), y(median(r) / 1e6)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"/>",
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap();
            let _ = writeln!(s, "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{c}\"/>");
        }
        let ly = top + 10.0 + 20.0 * k as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            left + pw + 12.0,
            left + pw + 32.0,
            left + pw + 38.0,
            ly + 4.0,
            xml_escape(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.max(1e-9).log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn slug(name: &str) -> String {
    name.chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' | '_' => Some('_'),
            _ => None,
        })
        .collect()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick")
        || std::env::var("KSYNC_BENCH_QUICK").is_ok_and(|v| v == "1");
    let writer_only = args.iter().any(|a| a == "--writer");
    let (dur, reps) = if quick {
        (Duration::from_millis(30), 1)
    } else {
        (
            Duration::from_millis(env_or("KSYNC_BENCH_MS", 200)),
            env_or("KSYNC_BENCH_REPS", 5usize).max(1),
        )
    };
    let io_every = env_or("KSYNC_MMAP_IO_EVERY", IO_EVERY);
    let io_us = env_or("KSYNC_MMAP_IO_US", IO_US);
    let cores = core_affinity::get_core_ids().map_or(0, |c| c.len());
    let start = Instant::now();

    if writer_only {
        print_writer(&writer_cost(dur, reps));
        return;
    }

    let results = [
        (
            measure(&FD, dur, reps),
            Report {
                pairs: &[(0, 1), (0, 2)],
                seed: "tiobench +13-15% (1.13-1.15x), 4-way Xeon",
            },
        ),
        (
            measure(&LIGHT, dur, reps),
            Report {
                pairs: &[(0, 1)],
                seed: "dd bs=1: sys 2.10 -> 1.87 s (1.12x), 2.4-2.5 -> 2.9-3.0 MB/s (~1.2x)",
            },
        ),
        (
            measure(&STAT, dur, reps),
            Report {
                pairs: &[(0, 1)],
                seed: "stat() loop 26.7 M -> 54.7 M (2.05x), 4-core/8-thread i7",
            },
        ),
        (
            measure(&WALK, dur, reps),
            Report {
                pairs: &[(0, 1)],
                seed: "parallel git diff 3.18 -> 3.12 s (1.02x)",
            },
        ),
        (
            measure(&MMAP, dur, reps),
            Report {
                pairs: &[(0, 2), (1, 2), (1, 3), (4, 5), (4, 1)],
                seed: "ebizzy sys 137.7 -> 124.3 s (1.11x), 2-way",
            },
        ),
        (
            {
                // Threads are CPUs: a sleeping fault's CPU idles.
                MMAP_SLEEP.inner().set_io(io_every, io_us, true);
                measure(&MMAP_SLEEP, dur, reps)
            },
            Report {
                pairs: &[(0, 1)],
                seed: "ebizzy sys 137.7 -> 124.3 s (1.11x), 2-way",
            },
        ),
    ];
    let writer = writer_cost(dur, reps);

    println!("# The seeds, rebuilt (host)\n");
    println!(
        "{} ms per measurement, {reps} reps, variants interleaved (order rotated per rep); \
         {cores} cores, thread i pinned to core i % {cores}; MAX_CPUS = {MAX_CPUS}.{}",
        dur.as_millis(),
        if quick {
            " Quick run: timings not judged."
        } else {
            ""
        }
    );
    if cores < 4 {
        println!(
            "With {cores} cores, 4 threads oversubscribe them: the 4-thread rows measure \
             threads preempted inside critical sections, not 4 CPUs."
        );
    }
    for (m, r) in &results {
        print_table(m, r);
    }
    println!(
        "\n{}: one fault in {io_every} sleeps {io_us} us inside its read section \
         (KSYNC_MMAP_IO_EVERY, KSYNC_MMAP_IO_US).",
        MmapSleep::NAME
    );
    let disturbed: usize = results
        .iter()
        .flat_map(|(m, _)| m.share.iter().flatten().flatten())
        .filter(|&&s| s < MIN_CPU_SHARE)
        .count();
    println!("\n## mmap_sem writer: one empty write section, no readers\n");
    print_writer(&writer);

    let goals = [
        (
            "fd lookup RCU / spinlock at 2 threads",
            ratio_at(&results[0].0, 0, 1, 2),
            2.0,
        ),
        (
            "fget_light light / always at 1 thread",
            ratio_at(&results[1].0, 0, 1, 1),
            1.15,
        ),
        (
            "stat() storm lockref / locked at 2 threads",
            ratio_at(&results[2].0, 0, 1, 2),
            2.0,
        ),
        (
            "mmap_sem PerCpuRwLock / spin::RwLock at 2 threads",
            ratio_at(&results[4].0, 0, 2, 2),
            1.5,
        ),
        (
            "mmap_sem Gated / spin::RwLock at 2 threads",
            ratio_at(&results[4].0, 1, 2, 2),
            1.5,
        ),
        (
            "mmap_sem PerCpuRwSemaphore / RwSemaphore at 2 threads, no I/O",
            ratio_at(&results[4].0, 4, 5, 2),
            1.11,
        ),
        (
            "mmap_sem, sleeping faults: PerCpuRwSemaphore / RwSemaphore at 2 threads",
            ratio_at(&results[5].0, 0, 1, 2),
            1.11,
        ),
    ];
    println!("\n## Goals (median of per-rep ratios)\n");
    for (what, v, target) in goals {
        let verdict = if quick {
            "(quick run: not judged)"
        } else if v >= target {
            "MET"
        } else {
            "NOT MET"
        };
        println!("- {what}: {v:.2}x (goal >= {target:.2}x): {verdict}");
    }
    if disturbed > 0 && !quick {
        println!(
            "- WARNING: in {disturbed} measurements a worker had less than {MIN_CPU_SHARE} of \
             its CPU (see the load checks): other load shared the cores; rerun on a quiet \
             machine before trusting these numbers."
        );
    }

    if !quick {
        let dir = std::env::var("KSYNC_SEEDS_PLOTS")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/plots").into());
        std::fs::create_dir_all(&dir).expect("creating the plot directory");
        for (m, _) in &results {
            let all: Vec<f64> = m.share.iter().flatten().flatten().copied().collect();
            let low = all.iter().filter(|&&s| s < MIN_CPU_SHARE).count();
            let note = format!(
                "{cores} cores, median of {reps}; {low}/{} runs disturbed by other load",
                all.len()
            );
            let path = format!("{dir}/{}.svg", slug(m.name));
            std::fs::write(&path, svg(m, &note)).expect("writing a plot");
            eprintln!("wrote {path}");
        }
    }
    eprintln!("total {:.1} s", start.elapsed().as_secs_f64());
}
