//! Tests that need a process of their own (one that aborts, hangs or
//! installs a process-wide allocator): the test binary runs again, only
//! that test, with an environment variable that makes it the child.

use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Runs test `name` of this binary in a child process with `var` set to
/// `value`, killed after `limit`. Returns its exit status (`None`: it was
/// killed, a hang) and its standard output and error.
pub(crate) fn run_child(
    name: &str,
    var: &str,
    value: &str,
    limit: Duration,
) -> (Option<ExitStatus>, String, String) {
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(var, value)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = proc.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            proc.kill().unwrap();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let out = proc.wait_with_output().unwrap();
    (
        status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
