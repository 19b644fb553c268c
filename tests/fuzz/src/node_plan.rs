//! The node-state + stage machine property.
//!
//! Input layout (through [`arbitrary::Unstructured`]): a NodeWright of up to four packages drawn
//! from a small pool of names and versions (so dependencies, upgrades and records of other versions
//! actually meet), each with an optional interrupt, dependsOn entries, uninstall flags and config;
//! then either raw annotation text (parsed as the operator would read it from a node) or a node
//! state built record by record with any stage, state and restart count. Running out of bytes is
//! not an error: whatever is left is taken as defaults.

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use nodewright_core::jobs::read::JobIndex;
use nodewright_core::rollout::plan::{Creation, plan_node};
use nodewright_core::rollout::stages::package_done;
use nodewright_shared::api::{
    Interrupt, InterruptType, NodeWright, NodeWrightSpec, Package, Uninstall,
};
use nodewright_shared::defaults::{OperatorDefaults, default_nodewright};
use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

const NAMES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];
const VERSIONS: [&str; 4] = ["1.0.0", "1.1.0", "2.0.0", "not-semver"];
const STATES: [State; 5] = [
    State::Complete,
    State::InProgress,
    State::Skipped,
    State::Erroring,
    State::Unknown,
];
const INTERRUPTS: [InterruptType; 4] = [
    InterruptType::Reboot,
    InterruptType::RestartAllServices,
    InterruptType::Service,
    InterruptType::Noop,
];
const NODE: &str = "node-0";

fn pick<T: Copy>(u: &mut Unstructured<'_>, from: &[T]) -> T {
    let i = u.choose_index(from.len()).unwrap_or(0);
    from[i]
}

fn flag(u: &mut Unstructured<'_>) -> bool {
    u.arbitrary::<bool>().unwrap_or(false)
}

fn package(u: &mut Unstructured<'_>) -> Package {
    let mut p = Package {
        version: pick(u, &VERSIONS).to_owned(),
        image: "ghcr.io/example/pkg".to_owned(),
        ..Package::default()
    };
    if flag(u) {
        p.interrupt = Some(Interrupt {
            kind: pick(u, &INTERRUPTS),
            services: if flag(u) {
                vec!["svc".to_owned()]
            } else {
                Vec::new()
            },
        });
    }
    for _ in 0..u.int_in_range(0..=2u8).unwrap_or(0) {
        p.depends_on
            .insert(pick(u, &NAMES).to_owned(), pick(u, &VERSIONS).to_owned());
    }
    if flag(u) {
        p.uninstall = Some(Uninstall {
            enabled: flag(u),
            apply: flag(u),
        });
    }
    if flag(u) {
        p.config_map = BTreeMap::from([("a.conf".to_owned(), "x".to_owned())]);
    }
    p
}

fn nodewright(u: &mut Unstructured<'_>) -> NodeWright {
    let mut spec = NodeWrightSpec {
        priority: nodewright_shared::api::DEFAULT_PRIORITY,
        serial: flag(u),
        ..NodeWrightSpec::default()
    };
    for _ in 0..u.int_in_range(0..=4u8).unwrap_or(0) {
        spec.packages.insert(pick(u, &NAMES).to_owned(), package(u));
    }
    // The plan runs on defaulted objects (the webhook or the operator filled the defaults).
    default_nodewright(&mut spec, &OperatorDefaults::default());
    NodeWright::new("fuzz", spec)
}

fn state(u: &mut Unstructured<'_>) -> NodeState {
    let mut state = NodeState::default();
    for _ in 0..u.int_in_range(0..=6u8).unwrap_or(0) {
        state.upsert(PackageStatus {
            name: pick(u, &NAMES).to_owned(),
            version: pick(u, &VERSIONS).to_owned(),
            image: "ghcr.io/example/pkg".to_owned(),
            container_sha: String::new(),
            stage: pick(u, &Stage::ALL),
            state: if flag(u) {
                Some(pick(u, &STATES))
            } else {
                None
            },
            restarts: u.int_in_range(0..=5).unwrap_or(0),
        });
    }
    state
}

/// What parses must write back to the same text's meaning.
fn parsed(text: &str) -> Option<NodeState> {
    let state = NodeState::parse(text).ok()?;
    let written = state.to_annotation();
    let again = NodeState::parse(&written).expect("the operator's own annotation parses");
    assert_eq!(
        again, state,
        "node state does not round-trip: {text:?} -> {written:?}"
    );
    Some(state)
}

/// See the crate documentation.
pub fn node_plan(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let nw = nodewright(&mut u);
    let state = if flag(&mut u) {
        let text = String::from_utf8_lossy(u.take_rest()).into_owned();
        match parsed(&text) {
            Some(state) => state,
            None => return,
        }
    } else {
        state(&mut u)
    };
    // No Jobs: what the plan decides from the node state alone.
    let jobs = JobIndex::with_fleet(Vec::new(), &[]);
    for fresh in [false, true] {
        let p = plan_node(&nw, NODE, &state, &jobs, fresh);
        for creation in &p.create {
            let (key, stage) = match creation {
                Creation::Package { key, stage, .. } => (key.as_str(), *stage),
                Creation::Interrupt { merged, stage } => (merged.owner.as_str(), *stage),
            };
            let package = nw
                .spec
                .packages
                .get(key)
                .unwrap_or_else(|| panic!("a Job planned for {key:?}, not in the NodeWright"));
            let record = state.get(key, &package.version);
            assert!(
                !record.is_some_and(|r| r.stage == stage && r.state == Some(State::Complete)),
                "a {stage} Job planned for {key} whose {stage} is recorded complete: {state:?} {:?}",
                nw.spec
            );
            assert!(
                !package_done(package, record),
                "a {stage} Job planned for {key}, which is done: {state:?} {:?}",
                nw.spec
            );
        }
        let written = p.state.to_annotation();
        assert_eq!(
            NodeState::parse(&written).ok().as_ref(),
            Some(&p.state),
            "the planned records do not round-trip: {written}"
        );
    }
}
