//! The agent's main flow (agent contract 4.4): copy, validate, run the steps of a mode chrooted
//! into the host, record flags, check results and history; or run an interrupt.
//!
//! Deliberate deviation from upstream: a failing step makes the agent exit with **that step's exit
//! code** (128 + signal when it was killed), not 1, so the exit code a test script chose (e.g.
//! `exit 3`) is visible in the container status, which is the only evidence the operator gets.
//! A step that fails with exit 0 (0 not in its `returncodes`) makes the agent exit 1. SIGTERM stops
//! the running step's process group at once (upstream waits for the step to end) and exits 143.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine as _;
use serde_json::json;

use crate::cli::{self, Command, Invocation, Mode};
use crate::clock::Utc;
use crate::config::{Config, ConfigError, Step};
use crate::env::{AgentEnv, EnvError};
use crate::exec::{self, ExecError, Outcome};
use crate::interrupt::{self, InterruptError, InterruptType};

/// Step log files kept per step (the newest).
pub const KEPT_LOGS: usize = 5;

/// A host file saying that `reboot` on this host reboots a test node, not a machine: written by the
/// real node of tests/controlplane/realnode.sh into its own `/run` (lost on every reboot) once its
/// stand-in `reboot` is in place.
pub const NODE_ALLOWS_REBOOT: &str = "/run/nodewright-test-node/allow-reboot";

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Args(#[from] cli::ArgError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("{path}: {source}")]
    Config {
        path: String,
        #[source]
        source: ConfigError,
    },
    #[error(transparent)]
    Interrupt(#[from] InterruptError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "copy dir {copy_dir} does not exist and there is no {data_dir} to fill it from (did the package's init container run?)"
    )]
    NoCopyDir { copy_dir: String, data_dir: String },
    #[error(
        "expected config files missing from {dir}: {missing:?} (set them in the package's configMap)"
    )]
    MissingConfigFiles { dir: String, missing: Vec<String> },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> AgentError {
    let path = path.display().to_string();
    move |source| AgentError::Io { what, path, source }
}

fn say(msg: impl std::fmt::Display) {
    println!("nodewright-test-agent: {msg}");
}

fn warn(msg: impl std::fmt::Display) {
    eprintln!("nodewright-test-agent: WARNING: {msg}");
}

/// Replaces `env:NAME` arguments with the variable's value; the names of missing variables are
/// the error.
pub fn substitute_env(
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<Vec<String>, Vec<String>> {
    let mut out = Vec::with_capacity(args.len());
    let mut missing = Vec::new();
    for a in args {
        match a.strip_prefix("env:") {
            Some(name) => match env.get(name) {
                Some(v) => out.push(v.clone()),
                None => missing.push(name.to_string()),
            },
            None => out.push(a.clone()),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

/// The step flag's name suffix: base64 of upstream's `"{arguments}_{returncodes}"` (Python list
/// reprs), URL-safe so it never contains a `/`.
pub fn flag_marker(step: &Step) -> String {
    let args: Vec<String> = step.arguments.iter().map(|a| format!("'{a}'")).collect();
    let codes: Vec<String> = step.returncodes.iter().map(i32::to_string).collect();
    let text = format!("[{}]_[{}]", args.join(", "), codes.join(", "));
    base64::engine::general_purpose::URL_SAFE.encode(text)
}

/// Copies a tree (files, directories, symlinks) over `dst`, replacing files that exist.
pub fn copy_tree(src: &Path, dst: &Path) -> Result<(), AgentError> {
    std::fs::create_dir_all(dst).map_err(io("create directory", dst))?;
    for entry in std::fs::read_dir(src).map_err(io("read directory", src))? {
        let entry = entry.map_err(io("read directory", src))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let ty = entry.file_type().map_err(io("stat", &from))?;
        if ty.is_dir() {
            copy_tree(&from, &to)?;
        } else if ty.is_symlink() {
            let target = std::fs::read_link(&from).map_err(io("read link", &from))?;
            if to.symlink_metadata().is_ok() {
                std::fs::remove_file(&to).map_err(io("replace", &to))?;
            }
            std::os::unix::fs::symlink(&target, &to).map_err(io("create link", &to))?;
        } else {
            std::fs::copy(&from, &to).map_err(io("copy to", &to))?;
        }
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<(), AgentError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("create directory", parent))?;
    }
    std::fs::write(path, text).map_err(io("write", path))
}

/// Removes all but the newest [`KEPT_LOGS`] `<stem>-<YYYY-mm-dd-HHMMSS>.log` files in `dir`.
pub fn reap_logs(dir: &Path, stem: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{stem}-");
    let mut logs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".log"))
                .is_some_and(|stamp| {
                    stamp.len() == 17 && stamp.bytes().all(|b| b.is_ascii_digit() || b == b'-')
                })
        })
        .collect();
    logs.sort_unstable_by(|a, b| b.cmp(a));
    for old in logs.iter().skip(KEPT_LOGS) {
        let _ = std::fs::remove_file(dir.join(old));
    }
}

/// One run of the agent.
pub struct Agent<'a> {
    pub inv: &'a Invocation,
    pub env: &'a AgentEnv,
    /// The container's environment, the base of every step's.
    pub container_env: &'a BTreeMap<String, String>,
    pub term: &'a AtomicBool,
}

impl Agent<'_> {
    /// A host path as seen here (`R + path`).
    fn host(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("{}{}", self.inv.root_mount, path))
    }

    fn copy_dir(&self) -> PathBuf {
        self.host(&self.inv.copy_dir)
    }

    fn skyhook_root(&self) -> PathBuf {
        self.host(&self.env.root_dir)
    }

    fn flags_dir(&self) -> PathBuf {
        self.skyhook_root().join("flags")
    }

    fn terminated(&self) -> bool {
        self.term.load(Ordering::SeqCst)
    }

    /// Runs the invocation; the result is the exit code.
    pub fn run(&self) -> Result<i32, AgentError> {
        let copy_dir = self.copy_dir();
        if !copy_dir.exists() {
            let data = Path::new(&self.env.data_dir);
            if !data.is_dir() {
                return Err(AgentError::NoCopyDir {
                    copy_dir: copy_dir.display().to_string(),
                    data_dir: self.env.data_dir.clone(),
                });
            }
            say(format_args!(
                "{} missing; copying {} there",
                copy_dir.display(),
                data.display()
            ));
            copy_tree(data, &copy_dir)?;
        }
        if self.inv.mode == Mode::Interrupt {
            return self.interrupt();
        }
        let config_path = copy_dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(io("read", &config_path))?;
        let config = Config::parse(&text).map_err(|source| AgentError::Config {
            path: config_path.display().to_string(),
            source,
        })?;
        let skyhook_dir = copy_dir.join("skyhook_dir");
        config
            .check_step_files(&skyhook_dir)
            .map_err(|source| AgentError::Config {
                path: config_path.display().to_string(),
                source,
            })?;
        say(format_args!(
            "mode {} of package {} {} (resource id {})",
            self.inv.mode, config.package_name, config.package_version, self.env.resource_id.raw
        ));
        if !self.inv.mode.is_uninstall() {
            let root_dir = copy_dir.join("root_dir");
            if root_dir.is_dir() {
                let target = if self.inv.root_mount.is_empty() {
                    PathBuf::from("/")
                } else {
                    PathBuf::from(&self.inv.root_mount)
                };
                say(format_args!(
                    "copying {} over {}",
                    root_dir.display(),
                    target.display()
                ));
                copy_tree(&root_dir, &target)?;
            }
            let configmaps = copy_dir.join("configmaps");
            let missing: Vec<String> = config
                .expected_config_files
                .iter()
                .filter(|f| !configmaps.join(f).is_file())
                .cloned()
                .collect();
            if !missing.is_empty() {
                return Err(AgentError::MissingConfigFiles {
                    dir: configmaps.display().to_string(),
                    missing,
                });
            }
        }
        self.copy_resolv()?;
        write_file(
            &self.flags_dir().join("START"),
            &format!("{} {}\n", Utc::now().rfc3339(), self.inv.mode),
        )?;
        if self.inv.mode.is_check() {
            self.run_checks(&config)
        } else {
            self.run_steps(&config)
        }
    }

    fn copy_resolv(&self) -> Result<(), AgentError> {
        let src = Path::new("/etc/resolv.conf");
        if !self.env.copy_resolv || self.inv.root_mount.is_empty() || !src.is_file() {
            return Ok(());
        }
        let dst = self.host("/etc/resolv.conf");
        let text = std::fs::read(src).map_err(io("read", src))?;
        if std::fs::read(&dst).ok().as_deref() == Some(text.as_slice()) {
            return Ok(());
        }
        say(format_args!(
            "COPY_RESOLV: copying /etc/resolv.conf to {}",
            dst.display()
        ));
        std::fs::write(&dst, text).map_err(io("write", &dst))
    }

    /// `PREVIOUS_VERSION` from the history (or `unknown`), for upgrade modes.
    fn previous_version(&self, config: &Config) -> Result<String, AgentError> {
        let (history, _) = self.read_history(config)?;
        Ok(history["current-version"]
            .as_str()
            .filter(|v| !v.is_empty())
            .unwrap_or("unknown")
            .to_string())
    }

    fn history_file(&self, config: &Config) -> PathBuf {
        self.skyhook_root()
            .join("history")
            .join(format!("{}.json", config.package_name))
    }

    fn read_history(&self, config: &Config) -> Result<(serde_json::Value, bool), AgentError> {
        let path = self.history_file(config);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok((json!({"current-version": "unknown", "history": []}), false));
        };
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) if v.is_object() => Ok((v, true)),
            _ => {
                let backup = PathBuf::from(format!("{}.backup", path.display()));
                std::fs::rename(&path, &backup).map_err(io("move corrupt history to", &backup))?;
                warn(format_args!(
                    "corrupt history file moved to {}",
                    backup.display()
                ));
                Ok((json!({"current-version": "", "history": []}), false))
            }
        }
    }

    fn write_history(&self, config: &Config, version: &str) -> Result<(), AgentError> {
        let (mut history, _) = self.read_history(config)?;
        let mut entries = history["history"].as_array().cloned().unwrap_or_default();
        entries.insert(0, json!({"version": version, "time": Utc::now().rfc3339()}));
        history["current-version"] = json!(version);
        history["history"] = json!(entries);
        let path = self.history_file(config);
        say(format_args!(
            "history {}: current-version {version}",
            path.display()
        ));
        write_file(&path, &history.to_string())
    }

    fn step_flag(&self, config: &Config, step: &Step) -> PathBuf {
        self.flags_dir()
            .join(&config.package_name)
            .join(&config.package_version)
            .join(format!("{}_{}", step.path, flag_marker(step)))
    }

    /// Runs one step; the outcome, or `Exited(1)` when an `env:` argument is missing.
    fn run_step(
        &self,
        config: &Config,
        step: &Step,
        versions: Option<&(String, String)>,
    ) -> Result<Outcome, AgentError> {
        let mut env = self.container_env.clone();
        let mut args = match substitute_env(&step.arguments, self.container_env) {
            Ok(a) => a,
            Err(missing) => {
                say(format_args!(
                    "FAILED: {}: expected environment variable(s) missing: {}",
                    step.path,
                    missing.join(", ")
                ));
                return Ok(Outcome::Exited(1));
            }
        };
        if let Some((previous, current)) = versions {
            env.insert("PREVIOUS_VERSION".into(), previous.clone());
            env.insert("CURRENT_VERSION".into(), current.clone());
            if step.upgrade_step {
                args.extend([previous.clone(), current.clone()]);
            }
        }
        env.extend(step.env.clone());
        let steps_dir = format!("{}/skyhook_dir", self.inv.copy_dir);
        env.insert("STEP_ROOT".into(), steps_dir.clone());
        env.insert("SKYHOOK_DIR".into(), self.inv.copy_dir.clone());

        let rel = step.path.trim_start_matches('/');
        let local = self.copy_dir().join("skyhook_dir").join(rel);
        if let Ok(meta) = std::fs::metadata(&local) {
            use std::os::unix::fs::PermissionsExt as _;
            let mut perms = meta.permissions();
            perms.set_mode(perms.mode() | 0o111);
            std::fs::set_permissions(&local, perms).map_err(io("chmod +x", &local))?;
        }
        let log = self.env.write_logs.then(|| {
            self.host(&self.env.log_dir)
                .join(&config.package_name)
                .join(&config.package_version)
                .join(format!("{rel}-{}.log", Utc::now().log_stamp()))
        });
        let mut argv = vec![format!("{steps_dir}/{rel}")];
        argv.extend(args.iter().cloned());
        say(format_args!(
            "running step {} ({})",
            step.name,
            argv.join(" ")
        ));
        let outcome = exec::run(
            &exec::Run {
                root: &self.inv.root_mount,
                cwd: Some(&self.inv.copy_dir),
                argv: &argv,
                env: &env,
                log: log.as_deref(),
            },
            self.term,
        )?;
        if let Some(log) = &log
            && let (Some(dir), Some(name)) = (log.parent(), Path::new(rel).file_name())
        {
            reap_logs(dir, &name.to_string_lossy());
        }
        let ok = matches!(outcome, Outcome::Exited(c) if step.returncodes.contains(&c));
        if ok {
            say(format_args!("SUCCEEDED: {} {}", step.path, args.join(" ")));
        } else {
            say(format_args!(
                "FAILED: {} {} {:?} (exit code {})",
                step.path,
                args.join(" "),
                outcome,
                outcome.code()
            ));
        }
        Ok(if ok { Outcome::Exited(0) } else { outcome })
    }

    fn versions(&self, config: &Config) -> Result<Option<(String, String)>, AgentError> {
        if self.inv.mode.is_upgrade() {
            Ok(Some((
                self.previous_version(config)?,
                config.package_version.clone(),
            )))
        } else {
            Ok(None)
        }
    }

    fn run_steps(&self, config: &Config) -> Result<i32, AgentError> {
        let mode = self.inv.mode;
        let steps = config.steps(mode);
        if steps.is_empty() {
            say(format_args!("no steps for mode {mode}; nothing to do"));
        }
        let versions = self.versions(config)?;
        for step in steps {
            if self.terminated() {
                return Ok(Outcome::Terminated.code());
            }
            let flag = self.step_flag(config, step);
            if flag.exists() {
                if self.env.always_run_step {
                    warn(format_args!(
                        "{} exists but OVERLAY_ALWAYS_RUN_STEP is set: running {}",
                        flag.display(),
                        step.path
                    ));
                } else if !matches!(mode, Mode::Apply | Mode::PostInterrupt) {
                    say(format_args!(
                        "flag exists but {mode} does not support idempotence: running {}",
                        step.path
                    ));
                } else if step.idempotence {
                    say(format_args!(
                        "flag exists but idempotence is disabled for {}: running it",
                        step.path
                    ));
                } else {
                    say(format_args!(
                        "skipping {} because {} exists",
                        step.path,
                        flag.display()
                    ));
                    continue;
                }
            }
            let outcome = self.run_step(config, step, versions.as_ref())?;
            if outcome == Outcome::Terminated {
                say("terminated (SIGTERM): the step was stopped");
                return Ok(outcome.code());
            }
            if outcome != Outcome::Exited(0) {
                return Ok(failure_code(outcome));
            }
            write_file(
                &flag,
                &json!({"last_run": Utc::now().rfc3339(), "always_run": step.idempotence})
                    .to_string(),
            )?;
        }
        Ok(0)
    }

    fn run_checks(&self, config: &Config) -> Result<i32, AgentError> {
        let mode = self.inv.mode;
        let steps = config.steps(mode);
        if steps.is_empty() {
            say(format_args!("no steps for mode {mode}; nothing to check"));
        }
        let versions = self.versions(config)?;
        let mut results = Vec::new();
        let mut first_failure = None;
        for step in steps {
            if self.terminated() {
                return Ok(Outcome::Terminated.code());
            }
            let outcome = self.run_step(config, step, versions.as_ref())?;
            if outcome == Outcome::Terminated {
                say("terminated (SIGTERM): the step was stopped");
                return Ok(outcome.code());
            }
            let ok = outcome == Outcome::Exited(0);
            results.push(json!({"name": step.name, "path": step.path,
                                "result": if ok { "ok" } else { "failed" }}));
            if !ok && first_failure.is_none() {
                first_failure = Some(failure_code(outcome));
            }
        }
        write_file(
            &self.flags_dir().join("check_results"),
            &serde_json::Value::Array(results).to_string(),
        )?;
        if let Some(code) = first_failure {
            return Ok(code);
        }
        write_file(
            &self.flags_dir().join(format!("{mode}_ALL_CHECKED")),
            &Utc::now().rfc3339(),
        )?;
        match mode {
            Mode::ApplyCheck | Mode::UpgradeCheck => {
                self.write_history(config, &config.package_version)?
            }
            Mode::UninstallCheck => {
                self.write_history(config, "uninstalled")?;
                let flags = self.flags_dir().join(&config.package_name);
                if flags.exists() {
                    std::fs::remove_dir_all(&flags).map_err(io("remove step flags", &flags))?;
                }
            }
            _ => {}
        }
        Ok(0)
    }

    fn has_binary(&self, name: &str) -> bool {
        [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/bin",
            "/bin",
            "/usr/sbin",
            "/sbin",
        ]
        .iter()
        .any(|d| self.host(&format!("{d}/{name}")).exists())
    }

    /// Whether `reboot` may run on this host: the environment says so, or the host does (the test
    /// real node writes [`NODE_ALLOWS_REBOOT`] into its own `/run` once its `reboot` is its own,
    /// tests/controlplane/realnode.sh). Never by default: on a developer's machine a real `reboot`
    /// would take the machine down. And only through the host's shell (see
    /// [`exec::chroot_command`]): without it, this image's busybox `reboot` would run instead.
    fn reboot_allowed(&self) -> bool {
        (self.env.allow_reboot || self.host(NODE_ALLOWS_REBOOT).is_file())
            && self.host("/bin/sh").is_file()
    }

    /// Why a command is only recorded instead of run, if it is.
    fn record_only(&self, kind: InterruptType, cmd: &[String]) -> Option<String> {
        let what = cmd.join(" ");
        match cmd.first().map(String::as_str) {
            Some("reboot") if !self.reboot_allowed() => Some(format!(
                "node_restart: reboot recorded, not executed (this host has no {NODE_ALLOWS_REBOOT}; \
                 set {}=1 to really reboot it)",
                crate::env::ALLOW_REBOOT
            )),
            Some("systemctl") => {
                let target = if cmd.get(1).map(String::as_str) == Some("restart") {
                    format!("restarting {}", cmd[2..].join(" "))
                } else {
                    what.clone()
                };
                if !self.has_binary("systemctl") {
                    Some(format!(
                        "{}: {target} (no systemctl on this host; recorded only)",
                        kind.as_str()
                    ))
                } else if !self.host("/run/systemd/system").is_dir() {
                    Some(format!(
                        "{}: {target} (systemd is not running on this host; recorded only)",
                        kind.as_str()
                    ))
                } else {
                    None
                }
            }
            Some("service")
                if !self.has_binary("service")
                    || !(self.host("/run/systemd/system").is_dir()
                        || self.host("/etc/init.d/procps").exists()) =>
            {
                Some(format!(
                    "{}: {what} (no service manager for it on this host; recorded only)",
                    kind.as_str()
                ))
            }
            _ => None,
        }
    }

    fn interrupt(&self) -> Result<i32, AgentError> {
        let b64 = self.inv.interrupt_b64.as_deref().unwrap_or_default();
        let spec = interrupt::decode(b64)?;
        let kind = spec.kind;
        let id = &self.env.resource_id;
        let flags = self
            .skyhook_root()
            .join("interrupts")
            .join("flags")
            .join(&id.raw);
        say(format_args!(
            "interrupt {} (services {:?}) for package {} {} (resource id {})",
            kind.as_str(),
            spec.services,
            id.package,
            id.version,
            id.raw
        ));
        if kind == InterruptType::NoOp {
            write_file(&flags.join("no_op.complete"), &Utc::now().rfc3339())?;
            say("no_op: nothing to run; flag no_op.complete written");
            return Ok(0);
        }
        let cmds = interrupt::commands(&spec);
        if cmds.is_empty() {
            say(format_args!("{}: no commands", kind.as_str()));
        }
        for (i, cmd) in cmds.iter().enumerate() {
            if self.terminated() {
                return Ok(Outcome::Terminated.code());
            }
            let flag = flags.join(format!("{}_{i}.complete", kind.as_str()));
            if flag.exists() {
                say(format_args!(
                    "{}: `{}` already done for this resource id ({} exists); skipping",
                    kind.as_str(),
                    cmd.join(" "),
                    flag.display()
                ));
                continue;
            }
            write_file(&flag, &Utc::now().rfc3339())?;
            if let Some(why) = self.record_only(kind, cmd) {
                say(why);
                continue;
            }
            say(format_args!(
                "{}: running `{}`",
                kind.as_str(),
                cmd.join(" ")
            ));
            let log = self.env.write_logs.then(|| {
                self.host(&self.env.log_dir)
                    .join("interrupts")
                    .join(format!(
                        "{}_{i}-{}.log",
                        kind.as_str(),
                        Utc::now().log_stamp()
                    ))
            });
            let outcome = exec::run(
                &exec::Run {
                    root: &self.inv.root_mount,
                    cwd: None,
                    argv: cmd,
                    env: self.container_env,
                    log: log.as_deref(),
                },
                self.term,
            )?;
            if outcome == Outcome::Exited(0) {
                say(format_args!("SUCCEEDED: {}", cmd.join(" ")));
                continue;
            }
            let rebooting = cmd[0] == "reboot"
                && matches!(outcome, Outcome::Terminated | Outcome::Signaled(15));
            if !rebooting {
                std::fs::remove_file(&flag).map_err(io("remove failed interrupt flag", &flag))?;
            }
            say(format_args!(
                "FAILED: {} {:?} (exit code {})",
                cmd.join(" "),
                outcome,
                outcome.code()
            ));
            return Ok(failure_code(outcome));
        }
        Ok(0)
    }
}

/// A failed step's exit code for the agent: never 0.
fn failure_code(outcome: Outcome) -> i32 {
    match outcome.code() {
        0 => 1,
        c => c,
    }
}

/// The whole program: arguments and environment in, exit code out.
pub fn main_with(args: &[String], env: &BTreeMap<String, String>, term: &AtomicBool) -> i32 {
    let inv = match cli::parse_args(args) {
        Ok(Command::Run(inv)) => inv,
        Ok(Command::UnknownMode(m)) => {
            warn(format_args!("unknown mode {m:?}: nothing to do"));
            return 0;
        }
        Err(e) => {
            eprintln!("nodewright-test-agent: error: {e}");
            return 2;
        }
    };
    let result = AgentEnv::from_env(env)
        .map_err(AgentError::from)
        .and_then(|agent_env| {
            Agent {
                inv: &inv,
                env: &agent_env,
                container_env: env,
                term,
            }
            .run()
        });
    match result {
        Ok(code) => {
            say(format_args!("mode {} finished: exit code {code}", inv.mode));
            code
        }
        Err(e) => {
            eprintln!("nodewright-test-agent: error: mode {}: {e}", inv.mode);
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::env_map as env;

    #[test]
    fn env_substitution() {
        let e = env(&[("FOO", "foo"), ("EMPTY", "")]);
        let args: Vec<String> = ["a", "env:FOO", "env:EMPTY", "envFOO"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            substitute_env(&args, &e),
            Ok(vec![
                "a".into(),
                "foo".into(),
                String::new(),
                "envFOO".into()
            ])
        );
        let args = vec!["env:NOPE".to_string(), "env:FOO".into(), "env:ALSO".into()];
        assert_eq!(
            substitute_env(&args, &e),
            Err(vec!["NOPE".to_string(), "ALSO".into()])
        );
    }

    #[test]
    fn flag_marker_is_a_file_name() {
        let step: Step = serde_json::from_value(json!({
            "name": "s", "path": "run.sh", "arguments": ["apply", "???>>>"], "returncodes": [0, 3],
            "on_host": true, "idempotence": false, "upgrade_step": false
        }))
        .expect("step");
        let m = flag_marker(&step);
        assert!(!m.contains('/'), "{m}");
        let decoded = base64::engine::general_purpose::URL_SAFE
            .decode(&m)
            .expect("base64");
        assert_eq!(decoded, b"['apply', '???>>>']_[0, 3]");
    }

    #[test]
    fn reboot_runs_only_where_the_host_or_the_environment_allows_it() {
        let root = tempfile::tempdir().expect("tempdir");
        let inv = Invocation {
            mode: Mode::Interrupt,
            root_mount: root.path().display().to_string(),
            copy_dir: "/copy".into(),
            interrupt_b64: None,
        };
        let container_env = env(&[(crate::env::RESOURCE_ID, "nw-1-1_pkg_1.0.0")]);
        let agent_env = AgentEnv::from_env(&container_env).expect("env");
        let term = AtomicBool::new(false);
        let agent = Agent {
            inv: &inv,
            env: &agent_env,
            container_env: &container_env,
            term: &term,
        };
        let reboot = vec!["reboot".to_string()];
        std::fs::create_dir_all(root.path().join("bin")).expect("mkdir");
        std::fs::write(root.path().join("bin/sh"), "").expect("the host's shell");
        let why = agent
            .record_only(InterruptType::NodeRestart, &reboot)
            .expect("a plain host: recorded only");
        assert!(why.contains("not executed"), "{why}");

        // The real node says its `reboot` is its own.
        let marker = root.path().join(NODE_ALLOWS_REBOOT.trim_start_matches('/'));
        std::fs::create_dir_all(marker.parent().expect("parent")).expect("mkdir");
        std::fs::write(&marker, "stand-ins in place").expect("marker");
        assert_eq!(agent.record_only(InterruptType::NodeRestart, &reboot), None);

        // Or the environment does.
        std::fs::remove_file(&marker).expect("rm");
        let allowed_env = AgentEnv {
            allow_reboot: true,
            ..agent_env.clone()
        };
        let agent = Agent {
            env: &allowed_env,
            ..agent
        };
        assert_eq!(agent.record_only(InterruptType::NodeRestart, &reboot), None);

        // Never without the host's shell (busybox's own `reboot` would run).
        std::fs::remove_file(root.path().join("bin/sh")).expect("rm");
        assert!(
            agent
                .record_only(InterruptType::NodeRestart, &reboot)
                .is_some()
        );
    }

    #[test]
    fn reaping_keeps_the_five_newest() {
        let dir = tempfile::tempdir().expect("tempdir");
        for s in 0..8 {
            let name = format!("run.sh-2025-01-01-00000{s}.log");
            std::fs::write(dir.path().join(&name), "").expect("write");
            std::fs::write(dir.path().join(format!("{name}.err")), "").expect("write");
        }
        std::fs::write(dir.path().join("other.sh-2025-01-01-000000.log"), "").expect("write");
        reap_logs(dir.path(), "run.sh");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".log"))
            .collect();
        left.sort();
        assert_eq!(left.len(), 6);
        assert_eq!(left[0], "other.sh-2025-01-01-000000.log");
        assert_eq!(left[1], "run.sh-2025-01-01-000003.log");
    }
}
