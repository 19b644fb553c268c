//! Runs one command chrooted into the host root (busybox/coreutils `chroot`, since `unsafe` and so
//! `pre_exec` are forbidden), tees its output line by line, and stops it on SIGTERM.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::clock::Utc;

/// How long a step may take to stop after SIGTERM before it is killed.
pub const TERM_GRACE: Duration = Duration::from_secs(3);

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    /// Killed by this signal (not by us).
    Signaled(i32),
    /// The agent got SIGTERM/SIGINT and stopped the command.
    Terminated,
}

impl Outcome {
    /// The shell convention: the exit code, or 128 + signal.
    pub fn code(self) -> i32 {
        match self {
            Outcome::Exited(c) => c,
            Outcome::Signaled(s) => 128 + s,
            Outcome::Terminated => 128 + Signal::SIGTERM as i32,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("could not start `chroot {root} {program}`: {source}")]
    Spawn {
        root: String,
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("could not create log file {path}: {source}")]
    Log {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for {program}: {source}")]
    Wait {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// What to run.
pub struct Run<'a> {
    /// The host root as mounted here (`R`; empty means `/`).
    pub root: &'a str,
    /// Working directory inside the chroot (needs `/bin/sh` in the root; else the cwd is `/`).
    pub cwd: Option<&'a str>,
    pub argv: &'a [String],
    /// The complete environment of the command.
    pub env: &'a BTreeMap<String, String>,
    /// `<log>` and `<log>.err` receive stdout and stderr.
    pub log: Option<&'a Path>,
}

fn open_log(path: PathBuf) -> Result<File, ExecError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| ExecError::Log {
            path: parent.display().to_string(),
            source,
        })?;
    }
    // Appended, not truncated: names carry the time to the second only, and two steps of one
    // package (apply, then apply-check in the next container) can start within the same second.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|source| ExecError::Log {
            path: path.display().to_string(),
            source,
        })
}

/// Copies `input` line by line to our stdout or stderr and to `file`, each line timestamped and
/// prefixed, flushing every line (kubectl logs must show a hanging step's lines at once).
fn pump(input: impl Read, prefix: &'static str, to_stderr: bool, mut file: Option<File>) {
    let mut reader = BufReader::new(input);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            buf.pop();
        }
        let line = format!(
            "{prefix} {} {}\n",
            Utc::now().rfc3339(),
            String::from_utf8_lossy(&buf)
        );
        // A closed stdout (no reader) must not stop the step; the log file still gets the line.
        if to_stderr {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(line.as_bytes()).and_then(|_| e.flush());
        } else {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(line.as_bytes()).and_then(|_| o.flush());
        }
        if let Some(f) = file.as_mut() {
            let _ = f.write_all(line.as_bytes()).and_then(|_| f.flush());
        }
    }
}

fn signal_group(child: &Child, sig: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // ESRCH (already gone) is fine.
        let _ = killpg(Pid::from_raw(pid), sig);
    }
}

/// Stops the command's whole process group: TERM, then KILL after [`TERM_GRACE`].
fn stop(child: &mut Child) {
    signal_group(child, Signal::SIGTERM);
    let deadline = Instant::now() + TERM_GRACE;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(child, Signal::SIGKILL);
    let _ = child.wait();
}

fn outcome(status: ExitStatus) -> Outcome {
    match (status.code(), status.signal()) {
        (Some(c), _) => Outcome::Exited(c),
        (None, Some(s)) => Outcome::Signaled(s),
        (None, None) => Outcome::Exited(1),
    }
}

/// The `chroot` command line for `r`. With a host shell, the command is started by it
/// (`/bin/sh -c 'cd "$1"; shift; exec "$@"'`): the host's PATH lookup finds the host's command. A
/// bare name given to `chroot` directly would run this image's busybox applet of that name instead
/// (busybox prefers its applets), e.g. busybox `reboot`, which signals PID 1, the machine's init
/// under hostPID, instead of the host's `reboot`.
pub fn chroot_command(r: &Run<'_>) -> Command {
    let root = if r.root.is_empty() { "/" } else { r.root };
    let mut cmd = Command::new("chroot");
    cmd.arg(root);
    if Path::new(&format!("{}/bin/sh", r.root)).exists() {
        cmd.args([
            "/bin/sh",
            "-c",
            "cd \"$1\" 2>/dev/null; shift; exec \"$@\"",
            "sh",
            r.cwd.unwrap_or("/"),
        ]);
    }
    cmd.args(r.argv);
    cmd
}

/// Runs the command to its end, or until `term` is set.
pub fn run(r: &Run<'_>, term: &AtomicBool) -> Result<Outcome, ExecError> {
    let root = if r.root.is_empty() { "/" } else { r.root };
    let program = r.argv.first().cloned().unwrap_or_default();
    let mut cmd = chroot_command(r);
    cmd.env_clear()
        .envs(r.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a TERM reaches the step's children too.
        .process_group(0);
    let (out_file, err_file) = match r.log {
        Some(p) => {
            let err = PathBuf::from(format!("{}.err", p.display()));
            (Some(open_log(p.to_path_buf())?), Some(open_log(err)?))
        }
        None => (None, None),
    };
    let mut child = cmd.spawn().map_err(|source| ExecError::Spawn {
        root: root.to_string(),
        program: program.clone(),
        source,
    })?;
    let (tx, rx) = mpsc::channel::<()>();
    let mut pumps = 0;
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        pumps += 1;
        std::thread::spawn(move || {
            pump(out, "[out]", false, out_file);
            let _ = tx.send(());
        });
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        pumps += 1;
        std::thread::spawn(move || {
            pump(err, "[err]", true, err_file);
            let _ = tx.send(());
        });
    }
    drop(tx);
    let status = loop {
        if term.load(Ordering::SeqCst) {
            stop(&mut child);
            return Ok(Outcome::Terminated);
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => {
                stop(&mut child);
                return Err(ExecError::Wait { program, source });
            }
        }
    };
    // Drain the output (children left in the background keep the pipes open: as upstream, wait
    // for them, but never past a SIGTERM).
    while pumps > 0 {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(()) => pumps -= 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if term.load(Ordering::SeqCst) {
                    signal_group(&child, Signal::SIGKILL);
                    return Ok(Outcome::Terminated);
                }
            }
        }
    }
    Ok(outcome(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_host_command_is_started_by_the_host_shell() {
        let root = tempfile::tempdir().expect("tempdir");
        let root_path = root.path().display().to_string();
        let argv = vec!["reboot".to_string()];
        let env = BTreeMap::new();
        let run = |cwd| Run {
            root: &root_path,
            cwd,
            argv: &argv,
            env: &env,
            log: None,
        };
        // No shell on the host: chroot runs the command itself.
        assert_eq!(
            args(&chroot_command(&run(None))),
            [root_path.as_str(), "reboot"]
        );

        std::fs::create_dir_all(root.path().join("bin")).expect("mkdir");
        std::fs::write(root.path().join("bin/sh"), "").expect("sh");
        let interrupt = args(&chroot_command(&run(None)));
        assert_eq!(interrupt[1], "/bin/sh", "{interrupt:?}");
        assert_eq!(&interrupt[4..], ["sh", "/", "reboot"], "{interrupt:?}");
        let step = args(&chroot_command(&run(Some("/copy"))));
        assert_eq!(&step[4..], ["sh", "/copy", "reboot"], "{step:?}");
    }
}
