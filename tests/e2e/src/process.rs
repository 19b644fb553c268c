//! Small facts about local processes and ports, for the suites that run the services as local
//! processes.

/// A free TCP port on 127.0.0.1 (free when asked: bound, then released for the caller's process to
/// take soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A `kB` field of `/proc/<pid>/status` (`VmHWM:`, `VmRSS:`), or `None` once the process is gone.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Peak RSS (`VmHWM`) of `pid` in KiB; 0 once it is gone.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:").unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(peak_rss_kib(me) > 0);
        assert!(status_kib(me, "VmRSS:").is_some());
        assert_eq!(status_kib(me, "NoSuchField:"), None);
        assert_ne!(free_port(), 0);
    }
}
