//! Booting a kernel under QEMU and reading what it printed: the command
//! line, a run with a timeout, and the `KSYNC-` marker lines (see
//! `qemu/README.md` for the protocol).

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::arch::{Accel, Config, PlanVia};
use super::qemu_dir;

/// The QEMU command that boots `kernel` in `config`, with `run` as the
/// kernel's arguments (passed the way the architecture's [`PlanVia`] says).
fn qemu_command(config: &Config, kernel: &Path, run: &str) -> Command {
    let run = &if config.words.is_empty() {
        run.to_string()
    } else {
        format!("{} {run}", config.words)
    };
    let arch = config.arch;
    let mut cmd = Command::new(arch.qemu);
    let accel = match config.accel {
        // One host thread per vCPU, so races between vCPUs are real.
        Accel::Tcg => "tcg,thread=multi",
        // icount needs TCG's single thread.
        Accel::TcgIcount => "tcg",
        Accel::Kvm => "kvm",
    };
    if config.accel == Accel::TcgIcount {
        cmd.args(["-icount", "shift=0"]);
    }
    cmd.args(["-accel", accel, "-cpu", config.cpu])
        .args(["-smp", &config.cpus.to_string(), "-m", "128M"])
        .args(["-nodefaults", "-display", "none", "-monitor", "none"])
        .args(["-serial", "stdio", "-M", arch.machine])
        .args(arch.qemu_args)
        .arg("-kernel")
        .arg(kernel);
    match arch.plan {
        PlanVia::FwCfg => cmd.args(["-fw_cfg", &format!("name=opt/ksync/run,string={run}")]),
        PlanVia::Append => cmd.args(["-append", run]),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What one QEMU run printed and how it ended.
pub struct Run {
    pub lines: Vec<String>,
    /// `None` when the run was killed at its timeout.
    pub status: Option<i32>,
    pub elapsed: Duration,
    pub log: PathBuf,
}

impl Run {
    /// The `KSYNC-` lines with the given tag, parsed.
    pub fn markers<'a>(&'a self, tag: &'a str) -> impl Iterator<Item = Marker> + 'a {
        self.lines
            .iter()
            .filter_map(move |line| Marker::parse(line, tag))
    }

    /// `suite`'s part of the run: its lines from its `KSYNC-START` line
    /// (from the boot, for the run's first suite) to the next suite's
    /// `KSYNC-START` line or the end; the whole run if it never started.
    /// A boot that ran one suite is all that suite's.
    pub fn suite_lines(&self, suite: &str) -> &[String] {
        let starts: Vec<usize> = self
            .lines
            .iter()
            .enumerate()
            .filter(|(_, line)| Marker::parse(line, "KSYNC-START").is_some())
            .map(|(i, _)| i)
            .collect();
        let Some(k) = starts.iter().position(|&i| {
            Marker::parse(&self.lines[i], "KSYNC-START")
                .is_some_and(|m| m.get("suite") == Some(suite))
        }) else {
            return &self.lines;
        };
        let from = if k == 0 { 0 } else { starts[k] };
        let to = starts.get(k + 1).copied().unwrap_or(self.lines.len());
        &self.lines[from..to]
    }

    /// The lockdep reports the kernel printed in `lines` (the run's, or a
    /// suite's part, [`suite_lines`](Self::suite_lines)): each
    /// `KSYNC-LOCKDEP` line, with the report's text (the lines up to the
    /// next `KSYNC-` line).
    pub fn lockdep_reports(lines: &[String]) -> Vec<(Marker, String)> {
        let mut reports = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if let Some(marker) = Marker::parse(line, "KSYNC-LOCKDEP") {
                let text: Vec<&str> = lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.starts_with("KSYNC-"))
                    .map(String::as_str)
                    .collect();
                reports.push((marker, text.join("\n")));
            }
        }
        reports
    }

    pub fn result(&self, suite: &str) -> Option<Marker> {
        self.markers("KSYNC-RESULT")
            .find(|m| m.get("suite") == Some(suite))
    }

    /// Why the run went wrong, in words, if it did.
    pub fn trouble(&self, config: &Config) -> Option<String> {
        let mut trouble = String::new();
        if let Some(cpus) = self.markers("KSYNC-CPUS").next() {
            let online = cpus.get("online").unwrap_or("?");
            if online != config.cpus.to_string() {
                let _ = write!(trouble, "only {online} of {} CPUs came up; ", config.cpus);
            }
        }
        for tag in ["KSYNC-FAULT", "KSYNC-PANIC"] {
            if let Some(line) = self.lines.iter().find(|l| l.starts_with(tag)) {
                let _ = write!(trouble, "{line}; ");
            }
        }
        match self.status {
            None => {
                let last = self.markers("KSYNC-START").last();
                let suite = last.as_ref().and_then(|m| m.get("suite")).unwrap_or("boot");
                let _ = write!(
                    trouble,
                    "timed out after {:.0} s in suite `{suite}` ({}); ",
                    self.elapsed.as_secs_f64(),
                    config.name
                );
            }
            Some(code) => {
                let done = self.markers("KSYNC-DONE").next();
                match done.as_ref().and_then(|m| m.get("status")) {
                    None => {
                        let cause = match config.arch.exit.silent_stop {
                            Some((silent, cause)) if silent == code => format!(" ({cause})"),
                            _ => String::new(),
                        };
                        let _ = write!(trouble, "QEMU exited {code} without a verdict{cause}; ");
                    }
                    Some(status) => {
                        let expected = config.arch.exit.verdict(status == "PASS");
                        if code != expected {
                            let _ = write!(
                                trouble,
                                "the kernel said {status} but QEMU exited {code} (expected {expected}); "
                            );
                        }
                    }
                }
            }
        }
        (!trouble.is_empty()).then(|| trouble.trim_end_matches("; ").to_string())
    }
}

/// A `KSYNC-TAG key=value key="quoted value" ...` line.
pub struct Marker(Vec<(String, String)>);

impl Marker {
    pub fn parse(line: &str, tag: &str) -> Option<Self> {
        let rest = line.strip_prefix(tag)?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let mut fields = Vec::new();
        let mut rest = rest.trim_start();
        while let Some(eq) = rest.find('=') {
            let key = rest[..eq].trim().to_string();
            let after = &rest[eq + 1..];
            let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"').unwrap_or(quoted.len());
                (
                    quoted[..end].to_string(),
                    quoted.get(end + 1..).unwrap_or(""),
                )
            } else {
                let end = after.find(' ').unwrap_or(after.len());
                (after[..end].to_string(), &after[end..])
            };
            fields.push((key, value));
            rest = next.trim_start();
        }
        Some(Self(fields))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn num(&self, key: &str) -> Option<f64> {
        self.get(key)?.parse().ok()
    }
}

/// Boots `kernel` in `config` with `run` as the kernel's arguments, killing
/// QEMU at `timeout`. Output is logged to `qemu/target/logs/`.
pub fn run_qemu(
    config: &Config,
    kernel: &Path,
    run: &str,
    timeout: Duration,
    label: &str,
) -> Result<Run, String> {
    let start = Instant::now();
    let mut child = qemu_command(config, kernel, run)
        .spawn()
        .map_err(|e| format!("cannot start QEMU for {}: {e}", config.name))?;
    let (tx, rx) = mpsc::channel();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as _),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| {
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line.trim_end_matches('\r').to_string());
            }
        })
    })
    .collect();
    drop(tx);
    let status = crate::tools::wait_with_timeout(&mut child, timeout);
    for reader in readers {
        let _ = reader.join();
    }
    let lines: Vec<String> = rx.into_iter().collect();
    let logs = qemu_dir().join("target").join("logs");
    let log = logs.join(format!(
        "{}-{}.log",
        config.name,
        label.replace([':', ' ', '/'], "_")
    ));
    let _ = fs::create_dir_all(&logs);
    let _ = fs::write(&log, lines.join("\n") + "\n");
    Ok(Run {
        lines,
        status,
        elapsed: start.elapsed(),
        log,
    })
}

#[cfg(test)]
mod tests {
    use super::qemu_command;
    use super::{Marker, Run};
    use crate::qemu::arch::Config;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    /// The command lines are the ones `qemu/README.md` documents.
    #[test]
    fn command_lines() {
        let line = |config: &Config| {
            let cmd = qemu_command(config, Path::new("k"), "rcu");
            let args: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            format!("{} {}", cmd.get_program().to_string_lossy(), args.join(" "))
        };
        let common = "-smp 4 -m 128M -nodefaults -display none -monitor none -serial stdio";
        let tail = "-kernel k -fw_cfg name=opt/ksync/run,string=rcu";
        let expected = [
            format!(
                "qemu-system-x86_64 -accel tcg,thread=multi -cpu qemu64 {common} -M q35 \
                 -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 {tail}"
            ),
            format!(
                "qemu-system-x86_64 -accel tcg,thread=multi -cpu qemu64 {common} -M q35 \
                 -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 {tail}"
            ),
            format!(
                "qemu-system-aarch64 -accel tcg,thread=multi -cpu max {common} -M virt \
                 -semihosting-config enable=on,target=native {tail}"
            ),
            format!(
                "qemu-system-aarch64 -accel tcg,thread=multi -cpu cortex-a57 {common} -M virt \
                 -semihosting-config enable=on,target=native {tail}"
            ),
            format!(
                "qemu-system-aarch64 -accel tcg,thread=multi -cpu cortex-a57 {common} -M virt \
                 -semihosting-config enable=on,target=native {tail}"
            ),
            format!(
                "qemu-system-riscv64 -accel tcg,thread=multi -cpu rv64 {common} -M virt \
                 -bios default -kernel k -append rcu"
            ),
        ];
        let configs = Config::all_tcg(4);
        let names: Vec<&str> = configs.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "x86_64-tcg",
                "x86_64-generic",
                "x86_64-lockdep",
                "aarch64-lse",
                "aarch64-llsc",
                "aarch64-generic",
                "riscv64-tcg"
            ]
        );
        // The lockdep image boots as the plain x86_64 one does.
        assert_eq!(line(&configs[0]), line(&configs[2]));
        let configs: Vec<&Config> = configs.iter().filter(|c| !c.variant.lockdep()).collect();
        for (config, expected) in configs.iter().zip(&expected) {
            assert_eq!(line(config), *expected);
        }
        let kvm = Config::all_kvm(4);
        assert_eq!(kvm.len(), 1);
        assert_eq!(kvm[0].name, "x86_64-kvm");
        assert!(line(&kvm[0]).starts_with("qemu-system-x86_64 -accel kvm -cpu qemu64 -smp 4"));
    }

    #[test]
    fn marker_fields() {
        let m = Marker::parse(
            r#"KSYNC-RESULT suite=rcu status=FAIL reason="a b" ops=12"#,
            "KSYNC-RESULT",
        )
        .expect("a marker");
        assert_eq!(m.get("suite"), Some("rcu"));
        assert_eq!(m.get("reason"), Some("a b"));
        assert_eq!(m.num("ops"), Some(12.0));
        assert_eq!(m.get("missing"), None);
        assert!(Marker::parse("KSYNC-RESULTS x=1", "KSYNC-RESULT").is_none());
        assert!(Marker::parse("noise", "KSYNC-RESULT").is_none());
    }

    #[test]
    fn suite_lines_split_a_boot() {
        let run = Run {
            lines: [
                "KSYNC-ARGS run=\"sched a lockdep\"",
                "KSYNC-START suite=a kind=test",
                "KSYNC-RESULT suite=a kind=test status=PASS",
                "KSYNC-START suite=lockdep kind=test",
                "KSYNC-LOCKDEP kind=Cycle cpu=1",
                "report text",
                "KSYNC-LOCKDEP-EXPECT suite=lockdep lockdep=true",
                "KSYNC-RESULT suite=lockdep kind=test status=PASS",
                "KSYNC-DONE status=PASS",
            ]
            .map(String::from)
            .to_vec(),
            status: Some(0),
            elapsed: Duration::ZERO,
            log: PathBuf::new(),
        };
        // The first suite's part starts at the boot; the last ends at the end.
        assert_eq!(run.suite_lines("a"), &run.lines[..3]);
        assert_eq!(run.suite_lines("lockdep"), &run.lines[3..]);
        assert!(Run::lockdep_reports(run.suite_lines("a")).is_empty());
        let reports = Run::lockdep_reports(run.suite_lines("lockdep"));
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].1, "report text");
        assert_eq!(run.suite_lines("never").len(), run.lines.len());
    }
}
