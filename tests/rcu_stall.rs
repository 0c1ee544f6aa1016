//! Host tests: idle and offline CPUs never hold up a grace period, a CPU
//! that is watching does, and stall reports name the CPUs that hold it up.
//!
//! One test function, so that no other test in this process is online
//! while the grace periods are counted (the stall detector is global).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ksync::{kernel, rcu};

/// A CPU (thread) told what to do over a channel.
struct Cpu {
    id: usize,
    tx: mpsc::Sender<Cmd>,
    ack: mpsc::Receiver<()>,
    handle: thread::JoinHandle<()>,
}

#[derive(Clone, Copy)]
enum Cmd {
    EnterRead,
    LeaveRead,
    Quiescent,
    IdleEnter,
    IdleExit,
    Offline,
    Online,
    Exit,
}

impl Cpu {
    fn start() -> Cpu {
        let (tx, rx) = mpsc::channel::<Cmd>();
        let (ack_tx, ack) = mpsc::channel();
        let (id_tx, id_rx) = mpsc::channel();
        let handle = thread::spawn(move || {
            rcu::cpu_online();
            id_tx.send(kernel::cpu_id()).unwrap();
            let mut guard = None;
            for cmd in rx {
                match cmd {
                    Cmd::EnterRead => guard = Some(rcu::read_lock()),
                    Cmd::LeaveRead => guard = None,
                    Cmd::Quiescent => rcu::quiescent_state(),
                    Cmd::IdleEnter => rcu::idle_enter(),
                    Cmd::IdleExit => rcu::idle_exit(),
                    Cmd::Offline => rcu::cpu_offline(),
                    Cmd::Online => rcu::cpu_online(),
                    Cmd::Exit => break,
                }
                ack_tx.send(()).unwrap();
            }
            drop(guard);
        });
        Cpu {
            id: id_rx.recv().unwrap(),
            tx,
            ack,
            handle,
        }
    }

    fn run(&self, cmd: Cmd) {
        self.tx.send(cmd).unwrap();
        self.ack.recv().unwrap();
    }

    fn stop(self) {
        self.tx.send(Cmd::Exit).unwrap();
        self.handle.join().unwrap();
    }
}

/// Waits up to `limit` for `cookie` (this CPU reporting quiescent states).
fn completes_within(cookie: rcu::Cookie, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if rcu::poll(cookie) {
            return true;
        }
        rcu::quiescent_state();
        thread::yield_now();
    }
    false
}

#[test]
fn idle_offline_and_stalls() {
    rcu::cpu_online();
    let me = kernel::cpu_id();
    let a = Cpu::start();
    let b = Cpu::start();

    // Watching CPUs that report nothing hold a grace period up...
    let cookie = rcu::start_poll();
    assert!(
        !completes_within(cookie, Duration::from_millis(100)),
        "a grace period ended while two online CPUs reported no quiescent state"
    );
    // ...until they report one.
    a.run(Cmd::Quiescent);
    b.run(Cmd::Quiescent);
    assert!(completes_within(cookie, Duration::from_secs(20)));

    // An idle CPU and an offline CPU never hold one up.
    a.run(Cmd::IdleEnter);
    b.run(Cmd::Offline);
    for _ in 0..3 {
        let cookie = rcu::start_poll();
        assert!(
            completes_within(cookie, Duration::from_secs(20)),
            "an idle or offline CPU stalled a grace period"
        );
    }
    // Back from idle and online: waited for again.
    a.run(Cmd::IdleExit);
    b.run(Cmd::Online);
    let cookie = rcu::start_poll();
    assert!(!completes_within(cookie, Duration::from_millis(50)));
    a.run(Cmd::Quiescent);
    assert!(
        !completes_within(cookie, Duration::from_millis(50)),
        "only one of two CPUs reported"
    );
    b.run(Cmd::Quiescent);
    assert!(completes_within(cookie, Duration::from_secs(20)));

    // Stall detection: off by default.
    a.run(Cmd::EnterRead);
    b.run(Cmd::EnterRead);
    let _ = rcu::start_poll();
    rcu::quiescent_state();
    assert!(rcu::check_stall(0).is_none());
    assert!(rcu::check_stall(1_000_000).is_none(), "detection is off");

    rcu::set_stall_timeout(10);
    let stalls = rcu::stall_count();
    assert!(
        rcu::check_stall(1_000).is_none(),
        "first sight of this grace period"
    );
    assert!(rcu::check_stall(1_009).is_none(), "not yet 10 old");
    let report = rcu::check_stall(1_010).expect("10 old: a stall");
    assert_eq!(report.nr_stalled(), 2, "{report}");
    assert!(report.names(a.id) && report.names(b.id), "{report}");
    assert!(!report.names(me), "{report}");
    assert_eq!(report.age(), 10);
    assert_eq!(rcu::stall_count(), stalls + 1);
    let text = report.to_string();
    assert!(
        text.contains(&a.id.to_string()) && text.contains(&b.id.to_string()),
        "{text}"
    );
    // Not again until three timeouts later.
    assert!(rcu::check_stall(1_020).is_none());
    // A leaves its read section and reports: only B is named next time.
    a.run(Cmd::LeaveRead);
    a.run(Cmd::Quiescent);
    let report = rcu::check_stall(1_040).expect("still stalled by B");
    assert_eq!(report.nr_stalled(), 1, "{report}");
    assert!(report.names(b.id) && !report.names(a.id), "{report}");
    assert_eq!(report.age(), 40);
    // B goes idle (a quiescent state only outside read sections).
    b.run(Cmd::LeaveRead);
    b.run(Cmd::IdleEnter);
    assert!(rcu::check_stall(1_100).is_none(), "the grace period ended");
    assert!(rcu::check_stall(10_000).is_none(), "no grace period runs");
    assert_eq!(rcu::stall_count(), stalls + 2);
    rcu::set_stall_timeout(0);

    a.stop();
    b.stop();
    rcu::cpu_offline();
}
