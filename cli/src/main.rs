//! `kubectl-nodewright`: see the library documentation.

fn main() -> std::process::ExitCode {
    nodewright_cli::main_exit()
}
