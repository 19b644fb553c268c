//! `completion bash|zsh|fish`: a completion script from the command definition (clap_complete).

use std::io::Write;

use clap::CommandFactory;
use clap_complete::{Shell as Target, generate};

use crate::args::{Cli, CompletionArgs, Shell};
use crate::error::Result;

/// The binary the scripts complete (kubectl plugins are run as `kubectl-<name>` by kubectl).
const BIN: &str = "kubectl-nodewright";

/// Runs `completion`.
pub fn run(args: &CompletionArgs) -> Result<()> {
    let shell = match args.shell {
        Shell::Bash => Target::Bash,
        Shell::Zsh => Target::Zsh,
        Shell::Fish => Target::Fish,
    };
    let mut command = Cli::command();
    let mut script = Vec::new();
    generate(shell, &mut command, BIN, &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}
