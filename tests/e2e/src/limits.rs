//! Resource limits for the services the suites run as local processes, enforced the way the
//! kubelet enforces a container's `resources.limits`: a cgroup per process with a memory limit
//! (the kernel's OOM killer acts at it) and a CFS CPU quota. The suites read the limits from the
//! chart as rendered, so "the chart's default limits" is what a `helm install` would give a pod.
//!
//! Works on cgroup v2 (unified) and on v1 hierarchies (`memory`, `cpu`), as root. Where neither is
//! writable [`Cgroup::create`] says why, and a suite reports its figures as unconfined rather than
//! pretending a limit was in force.

use std::path::{Path, PathBuf};

/// CPU and memory limits of one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU, in millicores (`resources.limits.cpu`).
    pub cpu_millis: Option<u64>,
    /// Memory, in bytes (`resources.limits.memory`).
    pub memory_bytes: Option<u64>,
}

/// Why limits could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// A quantity the chart rendered is not one this reader knows.
    #[error(
        "resources.limits.{field}={value:?}: expected an integer with an optional m (cpu) or Ki/Mi/Gi/k/M/G suffix"
    )]
    Quantity {
        /// `cpu` or `memory`.
        field: &'static str,
        /// The rendered value.
        value: String,
    },
    /// The chart could not be rendered or holds no such Deployment.
    #[error("reading the chart's resource limits: {0}")]
    Chart(String),
    /// No writable cgroup hierarchy.
    #[error("no writable cgroup hierarchy for {name}: {reason}")]
    Unavailable {
        /// The cgroup wanted.
        name: String,
        /// What was tried.
        reason: String,
    },
    /// Writing a control file failed.
    #[error("{path}: {source}")]
    Io {
        /// The control file or directory.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LimitsError + '_ {
    move |source| LimitsError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Limits {
    /// The limits of a container's `resources` as rendered (`{"limits": {"cpu": "1000m",
    /// "memory": "232Mi"}}`); absent ones are `None`.
    pub fn from_resources(resources: &serde_json::Value) -> Result<Limits, LimitsError> {
        let text = |field: &str| {
            let v = &resources["limits"][field];
            v.as_str()
                .map(str::to_owned)
                .or_else(|| v.as_u64().map(|n| n.to_string()))
        };
        let cpu_millis = text("cpu")
            .map(|v| {
                parse_quantity(&v, &[("m", 1)], 1000).ok_or(LimitsError::Quantity {
                    field: "cpu",
                    value: v,
                })
            })
            .transpose()?;
        let units = [
            ("Ki", 1 << 10),
            ("Mi", 1 << 20),
            ("Gi", 1 << 30),
            ("k", 1000),
            ("M", 1_000_000),
            ("G", 1_000_000_000),
        ];
        let memory_bytes = text("memory")
            .map(|v| {
                parse_quantity(&v, &units, 1).ok_or(LimitsError::Quantity {
                    field: "memory",
                    value: v,
                })
            })
            .transpose()?;
        Ok(Limits {
            cpu_millis,
            memory_bytes,
        })
    }

    /// `cgroup peak 38.8 MiB (17% of the limit)`: a peak against the memory limit.
    pub fn peak(&self, peak_bytes: u64) -> String {
        let mib = peak_bytes as f64 / (1 << 20) as f64;
        match self.memory_bytes {
            Some(m) => format!(
                "cgroup peak {mib:.1} MiB ({:.0}% of the limit)",
                100.0 * peak_bytes as f64 / m as f64
            ),
            None => format!("cgroup peak {mib:.1} MiB"),
        }
    }

    /// `cpu=1000m memory=232Mi` (or `none`).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.cpu_millis {
            parts.push(format!("cpu={m}m"));
        }
        if let Some(b) = self.memory_bytes {
            parts.push(format!("memory={}Mi", b / (1 << 20)));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    }
}

/// The resource limits of the first container of Deployment `nw-nodewright-<component>`
/// (`operator` or `webhook`) in the chart as rendered with its default values: what a
/// `helm install` gives the pod.
pub async fn chart_defaults(
    cluster: &crate::Cluster,
    component: &str,
) -> Result<Limits, LimitsError> {
    let name = format!("nw-nodewright-{component}");
    let objects = crate::chart::render(cluster, &[])
        .await
        .map_err(LimitsError::Chart)?;
    let deployment = objects
        .iter()
        .find(|v| v["kind"] == "Deployment" && v["metadata"]["name"] == name.as_str())
        .ok_or_else(|| LimitsError::Chart(format!("no Deployment {name} rendered")))?;
    Limits::from_resources(&deployment["spec"]["template"]["spec"]["containers"][0]["resources"])
}

/// `<digits><suffix>` times the suffix's factor (`bare` without a suffix).
fn parse_quantity(text: &str, units: &[(&str, u64)], bare: u64) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let factor = if suffix.is_empty() {
        bare
    } else {
        units.iter().find(|(s, _)| *s == suffix)?.1
    };
    n.checked_mul(factor)
}

/// What a confined process used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The highest memory charged to the cgroup (the figure the limit is compared with).
    pub peak_bytes: u64,
    /// Times the kernel's OOM killer killed a process of the cgroup.
    pub oom_kills: u64,
    /// Periods in which the CPU quota throttled it.
    pub throttled_periods: u64,
}

/// The layout found on this machine.
#[derive(Debug, Clone)]
enum Hierarchy {
    /// cgroup v2: one directory with `memory.max`, `cpu.max`.
    Unified(PathBuf),
    /// cgroup v1: a `memory` and a `cpu` directory.
    Split { memory: PathBuf, cpu: PathBuf },
}

/// A cgroup holding one service process, removed when dropped (after its processes are gone).
#[derive(Debug)]
pub struct Cgroup {
    name: String,
    limits: Limits,
    hierarchy: Hierarchy,
}

const ROOT: &str = "/sys/fs/cgroup";
const PARENT: &str = "nodewright-e2e";

fn write(path: &Path, value: &str) -> Result<(), LimitsError> {
    std::fs::write(path, value).map_err(io(path))
}

fn read_u64(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The value of `key` in a `key value` per line file (`memory.events`, `cpu.stat`).
fn keyed(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
        })
        .unwrap_or(0)
}

impl Cgroup {
    /// Creates (or resets) the cgroup `name` with `limits`. `name` must be unique among the
    /// processes running at once (a replica name, a trial number).
    pub fn create(name: &str, limits: Limits) -> Result<Cgroup, LimitsError> {
        let unified = Path::new(ROOT).join("cgroup.controllers");
        let hierarchy = if unified.exists() {
            let parent = Path::new(ROOT).join(PARENT);
            std::fs::create_dir_all(&parent).map_err(io(&parent))?;
            // Children may only use the controllers their parent hands down.
            let _ = std::fs::write(
                Path::new(ROOT).join("cgroup.subtree_control"),
                "+memory +cpu",
            );
            let sub = parent.join("cgroup.subtree_control");
            write(&sub, "+memory +cpu")?;
            Hierarchy::Unified(parent.join(name))
        } else if Path::new(ROOT).join("memory").is_dir() && Path::new(ROOT).join("cpu").is_dir() {
            Hierarchy::Split {
                memory: Path::new(ROOT).join("memory").join(PARENT).join(name),
                cpu: Path::new(ROOT).join("cpu").join(PARENT).join(name),
            }
        } else {
            return Err(LimitsError::Unavailable {
                name: name.to_owned(),
                reason: format!(
                    "neither {} nor {ROOT}/memory and {ROOT}/cpu",
                    unified.display()
                ),
            });
        };
        let cgroup = Cgroup {
            name: name.to_owned(),
            limits,
            hierarchy,
        };
        cgroup.remove();
        for dir in cgroup.dirs() {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        match &cgroup.hierarchy {
            Hierarchy::Unified(dir) => {
                if let Some(b) = limits.memory_bytes {
                    write(&dir.join("memory.max"), &b.to_string())?;
                    // No swap: the kubelet runs containers without it.
                    let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                }
                if let Some(m) = limits.cpu_millis {
                    write(&dir.join("cpu.max"), &format!("{} 100000", m * 100))?;
                }
            }
            Hierarchy::Split { memory, cpu } => {
                if let Some(b) = limits.memory_bytes {
                    write(&memory.join("memory.limit_in_bytes"), &b.to_string())?;
                    let _ = std::fs::write(memory.join("memory.swappiness"), "0");
                }
                if let Some(m) = limits.cpu_millis {
                    write(&cpu.join("cpu.cfs_period_us"), "100000")?;
                    write(&cpu.join("cpu.cfs_quota_us"), &(m * 100).to_string())?;
                }
            }
        }
        Ok(cgroup)
    }

    fn dirs(&self) -> Vec<PathBuf> {
        match &self.hierarchy {
            Hierarchy::Unified(dir) => vec![dir.clone()],
            Hierarchy::Split { memory, cpu } => vec![memory.clone(), cpu.clone()],
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The cgroup's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The shell arguments that join the cgroup and then `exec` `program` (same pid), so every
    /// byte the program allocates is charged there from its first instruction, as in a container.
    fn shell_args(&self, program: &Path) -> [std::ffi::OsString; 3] {
        let joins: Vec<String> = self
            .dirs()
            .iter()
            .map(|d| format!("echo $$ > '{}'", d.join("cgroup.procs").display()))
            .collect();
        [
            "-c".into(),
            format!("{} && exec \"$0\"", joins.join(" && ")).into(),
            program.into(),
        ]
    }

    /// A command that runs `program` inside the cgroup (see [`Cgroup::shell_args`]).
    pub fn command(&self, program: &Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("/bin/sh");
        command.args(self.shell_args(program));
        command
    }

    /// As [`Cgroup::command`], for `std::process`.
    pub fn std_command(&self, program: &Path) -> std::process::Command {
        let mut command = std::process::Command::new("/bin/sh");
        command.args(self.shell_args(program));
        command
    }

    /// What the cgroup's processes used so far.
    pub fn usage(&self) -> Usage {
        match &self.hierarchy {
            Hierarchy::Unified(dir) => Usage {
                peak_bytes: read_u64(&dir.join("memory.peak")),
                oom_kills: keyed(&dir.join("memory.events"), "oom_kill"),
                throttled_periods: keyed(&dir.join("cpu.stat"), "nr_throttled"),
            },
            Hierarchy::Split { memory, cpu } => Usage {
                peak_bytes: read_u64(&memory.join("memory.max_usage_in_bytes")),
                oom_kills: keyed(&memory.join("memory.oom_control"), "oom_kill"),
                throttled_periods: keyed(&cpu.join("cpu.stat"), "nr_throttled"),
            },
        }
    }

    fn remove(&self) {
        for dir in self.dirs() {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_quantities_the_chart_renders() {
        let l = Limits::from_resources(
            &serde_json::json!({"limits": {"cpu": "1000m", "memory": "232Mi"}}),
        )
        .expect("limits");
        assert_eq!(l.cpu_millis, Some(1000));
        assert_eq!(l.memory_bytes, Some(232 << 20));
        assert_eq!(l.describe(), "cpu=1000m memory=232Mi");
        assert_eq!(l.peak(58 << 20), "cgroup peak 58.0 MiB (25% of the limit)");
        let l = Limits::from_resources(&serde_json::json!({"limits": {"cpu": 2, "memory": "1Gi"}}))
            .expect("limits");
        assert_eq!((l.cpu_millis, l.memory_bytes), (Some(2000), Some(1 << 30)));
        let none = Limits::from_resources(&serde_json::json!({})).expect("no limits");
        assert_eq!(none.describe(), "none");
    }

    #[test]
    fn refuses_what_it_cannot_read_naming_the_field() {
        let e = Limits::from_resources(&serde_json::json!({"limits": {"memory": "1.5Gi"}}))
            .expect_err("fractions are not read");
        assert!(
            e.to_string().contains("resources.limits.memory=\"1.5Gi\""),
            "{e}"
        );
        let e = Limits::from_resources(&serde_json::json!({"limits": {"cpu": "1x"}}))
            .expect_err("unknown suffix");
        assert!(e.to_string().contains("resources.limits.cpu"), "{e}");
    }
}
