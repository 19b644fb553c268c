//! The operator binary. The reconcilers are not wired yet; the library holds the building blocks.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "usage: nodewright-operator (not runnable yet: the reconcilers are not wired; see the nodewright_operator library)"
    );
    ExitCode::from(2)
}
