//! Confirmation prompts: `[y/N]` on the terminal, `-y` to skip; without a terminal (a script, a
//! pipe) and without `-y` a write refuses instead of guessing.

use std::io::{BufRead, IsTerminal, Write};

use crate::error::{CliError, Result};

/// Asks `question` unless `yes`; `action` names what is refused when nobody can be asked.
pub fn confirm(yes: bool, action: &str, question: &str) -> Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::NeedsConfirmation {
            action: action.to_owned(),
        });
    }
    let mut err = std::io::stderr().lock();
    write!(err, "{question} [y/N]: ")?;
    err.flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if accepted(&answer) {
        Ok(())
    } else {
        Err(CliError::Declined)
    }
}

/// `y` or `yes`, any case.
fn accepted(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yes_is_yes() {
        assert!(accepted("y\n") && accepted(" YES ") && accepted("Y"));
        assert!(!accepted("") && !accepted("n") && !accepted("yep"));
    }
}
