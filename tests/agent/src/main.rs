//! `nodewright-test-agent MODE ROOT_MOUNT COPY_DIR [B64]`; see the library documentation.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use signal_hook::consts::{SIGINT, SIGTERM};

fn main() -> ExitCode {
    // Kubelet stops a pod with SIGTERM to PID 1, which is this agent: note it, and the running
    // step is stopped (its process group gets TERM, then KILL).
    let term = Arc::new(AtomicBool::new(false));
    for sig in [SIGTERM, SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&term)) {
            eprintln!("nodewright-test-agent: error: cannot handle signal {sig}: {e}");
            return ExitCode::from(1);
        }
    }
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let code = nodewright_test_agent::main_with(&args, &env, &term);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
