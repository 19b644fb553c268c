//! The agent's command line: `mode root_mount copy_dir [b64]`, and the legacy forms
//! `mode copy_dir` and `interrupt copy_dir b64` (root mount `/root`).

use std::fmt;

/// Root mount of the legacy argument forms.
pub const LEGACY_ROOT_MOUNT: &str = "/root";

/// A stage the agent runs. `Interrupt` is not a step mode of config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Apply,
    ApplyCheck,
    Config,
    ConfigCheck,
    PostInterrupt,
    PostInterruptCheck,
    Upgrade,
    UpgradeCheck,
    Uninstall,
    UninstallCheck,
    Interrupt,
}

impl Mode {
    /// Every step mode (the keys config.json's `modes` may use).
    pub const STEP_MODES: [Mode; 10] = [
        Mode::Apply,
        Mode::ApplyCheck,
        Mode::Config,
        Mode::ConfigCheck,
        Mode::PostInterrupt,
        Mode::PostInterruptCheck,
        Mode::Upgrade,
        Mode::UpgradeCheck,
        Mode::Uninstall,
        Mode::UninstallCheck,
    ];

    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "apply" => Mode::Apply,
            "apply-check" => Mode::ApplyCheck,
            "config" => Mode::Config,
            "config-check" => Mode::ConfigCheck,
            "post-interrupt" => Mode::PostInterrupt,
            "post-interrupt-check" => Mode::PostInterruptCheck,
            "upgrade" => Mode::Upgrade,
            "upgrade-check" => Mode::UpgradeCheck,
            "uninstall" => Mode::Uninstall,
            "uninstall-check" => Mode::UninstallCheck,
            "interrupt" => Mode::Interrupt,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Apply => "apply",
            Mode::ApplyCheck => "apply-check",
            Mode::Config => "config",
            Mode::ConfigCheck => "config-check",
            Mode::PostInterrupt => "post-interrupt",
            Mode::PostInterruptCheck => "post-interrupt-check",
            Mode::Upgrade => "upgrade",
            Mode::UpgradeCheck => "upgrade-check",
            Mode::Uninstall => "uninstall",
            Mode::UninstallCheck => "uninstall-check",
            Mode::Interrupt => "interrupt",
        }
    }

    pub fn is_check(self) -> bool {
        matches!(
            self,
            Mode::ApplyCheck
                | Mode::ConfigCheck
                | Mode::PostInterruptCheck
                | Mode::UpgradeCheck
                | Mode::UninstallCheck
        )
    }

    /// The check mode that verifies this non-check mode.
    pub fn check_mode(self) -> Option<Mode> {
        Some(match self {
            Mode::Apply => Mode::ApplyCheck,
            Mode::Config => Mode::ConfigCheck,
            Mode::PostInterrupt => Mode::PostInterruptCheck,
            Mode::Upgrade => Mode::UpgradeCheck,
            Mode::Uninstall => Mode::UninstallCheck,
            _ => return None,
        })
    }

    pub fn is_upgrade(self) -> bool {
        matches!(self, Mode::Upgrade | Mode::UpgradeCheck)
    }

    pub fn is_uninstall(self) -> bool {
        matches!(self, Mode::Uninstall | Mode::UninstallCheck)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub mode: Mode,
    /// Where the host's `/` is mounted in this container (`R`).
    pub root_mount: String,
    /// The package's copy directory, a host-absolute path (`C`).
    pub copy_dir: String,
    /// Base64 of the interrupt JSON (interrupt mode only).
    pub interrupt_b64: Option<String>,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(Invocation),
    /// A mode this agent does not know: upstream logs a warning and exits 0.
    UnknownMode(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgError {
    #[error(
        "expected 2 to 4 arguments (`MODE ROOT_MOUNT COPY_DIR [B64]`, or legacy `MODE COPY_DIR` / `interrupt COPY_DIR B64`), got {0}"
    )]
    Count(usize),
    #[error("mode interrupt needs the base64 interrupt JSON as its last argument")]
    MissingInterrupt,
    #[error("{what} must be an absolute path, got {value:?}")]
    NotAbsolute { what: &'static str, value: String },
}

/// Parses the arguments after the program name.
pub fn parse_args(args: &[String]) -> Result<Command, ArgError> {
    let Some(first) = args.first() else {
        return Err(ArgError::Count(0));
    };
    let Some(mode) = Mode::parse(first) else {
        if (2..=4).contains(&args.len()) {
            return Ok(Command::UnknownMode(first.clone()));
        }
        return Err(ArgError::Count(args.len()));
    };
    let (root_mount, copy_dir, b64) = match args.len() {
        2 => (LEGACY_ROOT_MOUNT.to_string(), args[1].clone(), None),
        3 if mode == Mode::Interrupt => (
            LEGACY_ROOT_MOUNT.to_string(),
            args[1].clone(),
            Some(args[2].clone()),
        ),
        3 => (args[1].clone(), args[2].clone(), None),
        4 => (args[1].clone(), args[2].clone(), Some(args[3].clone())),
        n => return Err(ArgError::Count(n)),
    };
    if mode == Mode::Interrupt && b64.is_none() {
        return Err(ArgError::MissingInterrupt);
    }
    for (what, value) in [("ROOT_MOUNT", &root_mount), ("COPY_DIR", &copy_dir)] {
        if !value.starts_with('/') {
            return Err(ArgError::NotAbsolute {
                what,
                value: value.clone(),
            });
        }
    }
    Ok(Command::Run(Invocation {
        mode,
        root_mount: root_mount.trim_end_matches('/').to_string(),
        copy_dir,
        interrupt_b64: if mode == Mode::Interrupt { b64 } else { None },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn run(a: &[&str]) -> Invocation {
        match parse_args(&args(a)) {
            Ok(Command::Run(inv)) => inv,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn three_and_four_argument_forms() {
        let inv = run(&["apply", "/root", "/var/lib/skyhook/nw/p-1.0.0-uid-1"]);
        assert_eq!(inv.mode, Mode::Apply);
        assert_eq!(inv.root_mount, "/root");
        assert_eq!(inv.copy_dir, "/var/lib/skyhook/nw/p-1.0.0-uid-1");
        assert_eq!(inv.interrupt_b64, None);

        let inv = run(&["interrupt", "/root", "/c", "eyJ0eXBlIjoibm9fb3AifQ=="]);
        assert_eq!(inv.mode, Mode::Interrupt);
        assert_eq!(
            inv.interrupt_b64.as_deref(),
            Some("eyJ0eXBlIjoibm9fb3AifQ==")
        );

        // A b64 given to a step mode is ignored.
        assert_eq!(
            run(&["config-check", "/root", "/c", "xx"]).interrupt_b64,
            None
        );
        // The root mount "/" (no root mount) concatenates cleanly.
        assert_eq!(run(&["apply", "/", "/c"]).root_mount, "");
    }

    #[test]
    fn legacy_forms_use_slash_root() {
        let inv = run(&["uninstall", "/c"]);
        assert_eq!(
            (inv.mode, inv.root_mount.as_str()),
            (Mode::Uninstall, "/root")
        );
        let inv = run(&["interrupt", "/c", "e30="]);
        assert_eq!(inv.root_mount, "/root");
        assert_eq!(inv.copy_dir, "/c");
        assert_eq!(inv.interrupt_b64.as_deref(), Some("e30="));
    }

    #[test]
    fn unknown_mode_and_bad_counts() {
        assert_eq!(
            parse_args(&args(&["frobnicate", "/root", "/c"])),
            Ok(Command::UnknownMode("frobnicate".into()))
        );
        assert_eq!(parse_args(&args(&[])), Err(ArgError::Count(0)));
        assert_eq!(parse_args(&args(&["apply"])), Err(ArgError::Count(1)));
        assert_eq!(
            parse_args(&args(&["apply", "/r", "/c", "b", "x"])),
            Err(ArgError::Count(5))
        );
        assert_eq!(
            parse_args(&args(&["interrupt", "/c"])),
            Err(ArgError::MissingInterrupt)
        );
        assert!(matches!(
            parse_args(&args(&["apply", "root", "/c"])),
            Err(ArgError::NotAbsolute { .. })
        ));
    }

    #[test]
    fn mode_names_round_trip() {
        for m in Mode::STEP_MODES.iter().copied().chain([Mode::Interrupt]) {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
        }
        assert_eq!(Mode::Apply.check_mode(), Some(Mode::ApplyCheck));
        assert!(Mode::PostInterruptCheck.is_check());
        assert!(!Mode::Interrupt.is_check());
    }
}
