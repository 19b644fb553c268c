//! The stage chain of a rollout without interrupts, per node: each package runs `apply` then
//! `config`, and a package's `apply` starts once the `config` of each of its `dependsOn` completed.
//! Both the floor driver (what to create when a Job completes) and the trace (which Job a new Job
//! waited for) read it, so both measure the same chain.

use std::collections::BTreeMap;

use nodewright_shared::api::NodeWright;
use nodewright_shared::node_state::Stage;

/// One step of the chain on one node: a package and its stage.
pub type Step = (String, Stage);

/// Why a NodeWright cannot be measured by the chain.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The floor has no interrupt Jobs (cordon, drain, reboot): the bench rollout has none.
    #[error(
        "package {0} has an interrupt or config interrupts: the Job-chain floor measures apply/config chains only; remove them from the bench manifest"
    )]
    Interrupt(String),
    /// A dependency names no package of the NodeWright.
    #[error("package {package} depends on {dependency}, which is not a package of the NodeWright")]
    UnknownDependency {
        /// The package.
        package: String,
        /// The missing dependency.
        dependency: String,
    },
}

/// The chain of a NodeWright's packages.
#[derive(Debug, Clone)]
pub struct Chain {
    /// Package → the packages it depends on.
    deps: BTreeMap<String, Vec<String>>,
}

impl Chain {
    /// The chain of `nodewright`'s packages.
    pub fn of(nodewright: &NodeWright) -> Result<Chain, ChainError> {
        let packages = &nodewright.spec.packages;
        let mut deps = BTreeMap::new();
        for (name, package) in packages {
            if package.interrupt.is_some() || !package.config_interrupts.is_empty() {
                return Err(ChainError::Interrupt(name.clone()));
            }
            for dependency in package.depends_on.keys() {
                if !packages.contains_key(dependency) {
                    return Err(ChainError::UnknownDependency {
                        package: name.clone(),
                        dependency: dependency.clone(),
                    });
                }
            }
            deps.insert(name.clone(), package.depends_on.keys().cloned().collect());
        }
        Ok(Chain { deps })
    }

    /// The steps every node starts with: `apply` of each package without dependencies.
    pub fn roots(&self) -> Vec<Step> {
        self.deps
            .iter()
            .filter(|(_, d)| d.is_empty())
            .map(|(p, _)| (p.clone(), Stage::Apply))
            .collect()
    }

    /// The steps that must complete before `step` may start.
    pub fn predecessors(&self, step: &Step) -> Vec<Step> {
        let (package, stage) = step;
        match stage {
            Stage::Config => vec![(package.clone(), Stage::Apply)],
            Stage::Apply => self
                .deps
                .get(package)
                .into_iter()
                .flatten()
                .map(|d| (d.clone(), Stage::Config))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The steps that `step` completing may unblock.
    pub fn successors(&self, step: &Step) -> Vec<Step> {
        let (package, stage) = step;
        match stage {
            Stage::Apply => vec![(package.clone(), Stage::Config)],
            Stage::Config => self
                .deps
                .iter()
                .filter(|(_, d)| d.contains(package))
                .map(|(p, _)| (p.clone(), Stage::Apply))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Steps per node.
    pub fn len(&self) -> usize {
        self.deps.len() * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{NodeWrightSpec, Package};

    fn package(deps: &[&str]) -> Package {
        Package {
            version: "1.0.0".into(),
            image: "img".into(),
            depends_on: deps
                .iter()
                .map(|d| ((*d).to_owned(), "1.0.0".to_owned()))
                .collect(),
            ..Package::default()
        }
    }

    #[test]
    fn gamma_waits_for_the_config_of_alpha_and_beta() {
        let nw = NodeWright::new(
            "bench",
            NodeWrightSpec {
                packages: [
                    ("alpha".to_owned(), package(&[])),
                    ("beta".to_owned(), package(&[])),
                    ("gamma".to_owned(), package(&["alpha", "beta"])),
                ]
                .into(),
                ..NodeWrightSpec::default()
            },
        );
        let chain = Chain::of(&nw).expect("chain");
        let s = |p: &str, st| (p.to_owned(), st);
        assert_eq!(
            chain.roots(),
            [s("alpha", Stage::Apply), s("beta", Stage::Apply)]
        );
        assert_eq!(
            chain.successors(&s("alpha", Stage::Config)),
            [s("gamma", Stage::Apply)]
        );
        assert_eq!(
            chain.predecessors(&s("gamma", Stage::Apply)),
            [s("alpha", Stage::Config), s("beta", Stage::Config)]
        );
        assert!(chain.successors(&s("gamma", Stage::Config)).is_empty());
        assert_eq!(chain.len(), 6);
    }
}
