//! Each workload with 4 threads (CPUs) on the host: every correct variant
//! passes its check under torture, and the broken control is caught.
//! Runs are time-bound (a 2-core machine runs 4 threads fine, slowly).

mod common;

use std::time::Duration;

use seeds::fd::FdLookup;
use seeds::fget_light::FgetLight;
use seeds::mmap::{IO_EVERY, IO_US, MmapSem, MmapSleep};
use seeds::stat::StatStorm;
use seeds::walk::PathWalk;
use seeds::{Config, Workload};

const THREADS: usize = 4;
const RUN: Duration = Duration::from_millis(150);
const CONTROL_BUDGET: Duration = Duration::from_secs(10);

/// Every correct variant, torture and measured configurations.
fn correct<W: Workload>(w: &'static W) {
    let _serial = common::serial();
    for &(variant, label) in W::VARIANTS {
        if variant == W::CONTROL {
            continue;
        }
        for config in [Config::TORTURE, W::BENCH] {
            // On a loaded 2-core host a thread of 4 can get no core for a
            // whole short run (spinning waiters starve it): give it up to
            // two longer runs before calling it starved.
            let mut dur = RUN;
            let mut r = common::run(w, variant, config, THREADS, dur, false);
            while r.check.is_ok() && r.counts.iter().any(|c| c.ops == 0) && dur < RUN * 16 {
                dur *= 4;
                r = common::run(w, variant, config, THREADS, dur, false);
            }
            let total = r.total();
            if let Err(v) = r.check {
                panic!("{}: {label} ({config:?}) failed its check: {v}", W::NAME);
            }
            assert!(total.ops > 0, "{}: {label}: no progress", W::NAME);
            assert!(
                r.counts.iter().all(|c| c.ops > 0),
                "{}: {label}: a thread made no progress: {:?}",
                W::NAME,
                r.counts
            );
            eprintln!("{}: {label} {config:?}: {total:?}", W::NAME);
        }
    }
}

fn control<W: Workload>(w: &'static W) {
    let _serial = common::serial();
    match common::run_control(w, THREADS, CONTROL_BUDGET) {
        Some(v) => eprintln!("{}: control caught: {v}", W::NAME),
        None => panic!(
            "{}: the broken control was not caught in {CONTROL_BUDGET:?}",
            W::NAME
        ),
    }
}

static FD: FdLookup = FdLookup::new();
static FD_CONTROL: FdLookup = FdLookup::new();
static LIGHT: FgetLight = FgetLight::new();
static LIGHT_CONTROL: FgetLight = FgetLight::new();
static STAT: StatStorm = StatStorm::new();
static STAT_CONTROL: StatStorm = StatStorm::new();
static WALK: PathWalk = PathWalk::new();
static WALK_CONTROL: PathWalk = PathWalk::new();
static MMAP: MmapSem = MmapSem::new();
static MMAP_CONTROL: MmapSem = MmapSem::new();
static MMAP_SLEEP: MmapSleep = MmapSleep::new();
static MMAP_SLEEP_CONTROL: MmapSleep = MmapSleep::new();

#[test]
fn fd_lookup() {
    correct(&FD);
}

#[test]
fn fd_lookup_control_caught() {
    control(&FD_CONTROL);
}

#[test]
fn fget_light() {
    correct(&LIGHT);
}

#[test]
fn fget_light_control_caught() {
    control(&LIGHT_CONTROL);
}

#[test]
fn stat_storm() {
    correct(&STAT);
}

#[test]
fn stat_storm_control_caught() {
    control(&STAT_CONTROL);
}

#[test]
fn path_walk() {
    correct(&WALK);
}

#[test]
fn path_walk_control_caught() {
    control(&WALK_CONTROL);
}

#[test]
fn mmap_sem() {
    correct(&MMAP);
}

#[test]
fn mmap_sem_control_caught() {
    control(&MMAP_CONTROL);
}

// Threads are CPUs here: a sleeping fault's CPU idles (see `set_io`).
#[test]
fn mmap_sem_sleeping() {
    MMAP_SLEEP.inner().set_io(IO_EVERY, IO_US, true);
    correct(&MMAP_SLEEP);
}

#[test]
fn mmap_sem_sleeping_control_caught() {
    MMAP_SLEEP_CONTROL.inner().set_io(IO_EVERY, IO_US, true);
    control(&MMAP_SLEEP_CONTROL);
}
