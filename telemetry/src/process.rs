//! `process_*` metrics of the running process, read from `/proc/self` on every scrape (Linux).
//!
//! The names, types and units are Prometheus' own (client_golang's process collector), so the
//! usual panels and alerts work: `process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`, plus `process_threads`. A value that cannot be read (another OS,
//! `/proc` not mounted) is left out of the exposition rather than reported as 0.
//!
//! Register it on a registry without a prefix ([`ProcessCollector::register`]): the names are
//! standard and carry no product prefix.

use std::path::{Path, PathBuf};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The names of the metrics this collector exports (`process_cpu_seconds` is a counter, exposed
/// as `process_cpu_seconds_total`).
pub const NAMES: &[&str] = &[
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
    "process_threads",
];

/// Clock ticks per second of the times in `/proc/<pid>/stat`: the kernel's `USER_HZ`, fixed at 100
/// by its user-space ABI on every architecture Kubernetes runs on (Prometheus' procfs library
/// assumes the same).
const USER_HZ: f64 = 100.0;

/// One reading of the process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size (`VmRSS`), in bytes.
    pub resident_bytes: Option<i64>,
    /// Virtual memory size (`VmSize`), in bytes.
    pub virtual_bytes: Option<i64>,
    /// Open file descriptors.
    pub open_fds: Option<i64>,
    /// Soft limit of open file descriptors.
    pub max_fds: Option<i64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
    /// Threads.
    pub threads: Option<i64>,
}

/// Reads `/proc/self` (and `/proc/stat` for the boot time) on every scrape.
#[derive(Debug, Clone)]
pub struct ProcessCollector {
    proc_root: PathBuf,
    pid: String,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        ProcessCollector {
            proc_root: PathBuf::from("/proc"),
            pid: "self".to_owned(),
        }
    }
}

impl ProcessCollector {
    /// A collector of another process under another `/proc` root (for tests).
    pub fn of(proc_root: impl Into<PathBuf>, pid: impl Into<String>) -> Self {
        ProcessCollector {
            proc_root: proc_root.into(),
            pid: pid.into(),
        }
    }

    /// Registers a collector of this process on `registry` (which should have no prefix).
    pub fn register(registry: &mut Registry) {
        registry.register_collector(Box::new(ProcessCollector::default()));
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join(&self.pid).join(name)).ok()
    }

    /// What the process looks like now.
    pub fn sample(&self) -> Sample {
        let stat = self.file("stat");
        let stat = stat.as_deref().and_then(parse_stat);
        let status = self.file("status").unwrap_or_default();
        let boot = std::fs::read_to_string(self.proc_root.join("stat"))
            .ok()
            .and_then(|s| boot_time(&s));
        Sample {
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: status_kib(&status, "VmRSS:").map(|k| k.saturating_mul(1024)),
            virtual_bytes: status_kib(&status, "VmSize:").map(|k| k.saturating_mul(1024)),
            open_fds: count_entries(&self.proc_root.join(&self.pid).join("fd")),
            max_fds: self.file("limits").as_deref().and_then(max_open_files),
            start_time_seconds: match (stat, boot) {
                (Some(s), Some(b)) => Some(b as f64 + s.start_ticks as f64 / USER_HZ),
                _ => None,
            },
            threads: status_kib(&status, "Threads:"),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.sample();
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        let gauges: [(&str, &str, Option<i64>); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds,
            ),
            ("process_threads", "Number of OS threads", s.threads),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        if let Some(v) = s.start_time_seconds {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                None,
                g.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// The fields of `/proc/<pid>/stat` that are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 14: user time, in ticks.
    pub utime: u64,
    /// Field 15: system time, in ticks.
    pub stime: u64,
    /// Field 22: start time after boot, in ticks.
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2, in parentheses) may contain spaces and
/// parentheses, so fields are counted from after its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // rest starts with field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
    })
}

/// The number after `key` in `/proc/<pid>/status` (`VmRSS:   1234 kB` gives 1234).
pub fn status_kib(status: &str, key: &str) -> Option<i64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
pub fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|n| n.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits` (`unlimited` is left out).
pub fn max_open_files(limits: &str) -> Option<i64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn count_entries(dir: &Path) -> Option<i64> {
    let entries = std::fs::read_dir(dir).ok()?;
    i64::try_from(entries.count()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis must not shift the fields.
        let text = "4242 (tokio (worker) 1) S 1 4242 4242 0 -1 4194560 2500 0 0 0 \
                    350 120 0 0 20 0 9 0 123456 250000000 12000 18446744073709551615";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                utime: 350,
                stime: 120,
                start_ticks: 123456,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None, "too few fields");
    }

    #[test]
    fn status_limits_and_boot_time() {
        let status = "Name:\toperator\nVmSize:\t  250000 kB\nVmRSS:\t   48000 kB\nThreads:\t9\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(48000));
        assert_eq!(status_kib(status, "VmSize:"), Some(250000));
        assert_eq!(status_kib(status, "Threads:"), Some(9));
        assert_eq!(status_kib(status, "VmHWM:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max cpu time              unlimited            unlimited            seconds\n\
                      Max open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576));
        assert_eq!(
            max_open_files("Max open files            unlimited            unlimited  files"),
            None
        );
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
    }

    /// A fake `/proc` with one process: every metric is computed from it, with Prometheus' names.
    #[test]
    fn a_fake_proc_tree_gives_every_metric() {
        let root = std::env::temp_dir().join(format!("nw-proc-{}", std::process::id()));
        let pid = root.join("77");
        std::fs::create_dir_all(pid.join("fd")).expect("dirs");
        for fd in ["0", "1", "2"] {
            std::fs::write(pid.join("fd").join(fd), "").expect("fd");
        }
        std::fs::write(
            pid.join("stat"),
            "77 (op) S 1 77 77 0 -1 0 0 0 0 0 250 50 0 0 20 0 4 0 1000 1 1",
        )
        .expect("stat");
        std::fs::write(
            pid.join("status"),
            "VmSize:\t 2000 kB\nVmRSS:\t 1000 kB\nThreads:\t4\n",
        )
        .expect("status");
        std::fs::write(
            pid.join("limits"),
            "Max open files            4096  4096  files\n",
        )
        .expect("limits");
        std::fs::write(root.join("stat"), "btime 1700000000\n").expect("boot");
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector::of(&root, "77")));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        std::fs::remove_dir_all(&root).ok();
        for line in [
            "process_cpu_seconds_total 3.0",
            "process_resident_memory_bytes 1024000",
            "process_virtual_memory_bytes 2048000",
            "process_open_fds 3",
            "process_max_fds 4096",
            "process_threads 4",
            "process_start_time_seconds 1700000010.0",
            "# TYPE process_cpu_seconds counter",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn this_process_is_read() {
        if !Path::new("/proc/self/stat").exists() {
            return; // not Linux: nothing to read, nothing reported
        }
        let s = ProcessCollector::default().sample();
        assert!(s.resident_bytes.is_some_and(|b| b > 0), "{s:?}");
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(s.start_time_seconds.is_some_and(|t| t > 1.0e9), "{s:?}");
        assert!(s.cpu_seconds.is_some(), "{s:?}");
    }
}
