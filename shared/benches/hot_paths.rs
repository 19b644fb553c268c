//! Functions the operator runs per node per reconcile (node-state parse/serialise, stage deadlines)
//! and the webhook runs per request (duration checks, defaulting).
//! Run: `cargo bench -p nodewright-shared --bench hot_paths`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nodewright_shared::api::{NodeWrightSpec, Package};
use nodewright_shared::deadline::{check_stage_timeout, stage_deadline};
use nodewright_shared::defaults::{OperatorDefaults, default_nodewright};
use nodewright_shared::duration::GoDuration;
use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

fn node_state_with(n: usize) -> NodeState {
    let mut state = NodeState::default();
    for i in 0..n {
        state.upsert(PackageStatus {
            name: format!("package-{i}"),
            version: "1.2.3".into(),
            image: format!("ghcr.io/example/package-{i}"),
            container_sha: String::new(),
            stage: Stage::PostInterrupt,
            state: Some(State::Complete),
            restarts: 0,
        });
    }
    state
}

fn benches(c: &mut Criterion) {
    c.bench_function("duration_parse_2h45m30.5s", |b| {
        b.iter(|| GoDuration::parse(black_box("2h45m30.5s")))
    });
    c.bench_function("duration_format", |b| {
        let d = GoDuration::from_nanos(9_930_500_000_000);
        b.iter(|| black_box(d).to_string())
    });
    c.bench_function("check_stage_timeout_then_deadline", |b| {
        b.iter(|| check_stage_timeout(black_box("1h30m")).map(stage_deadline))
    });
    let annotation = node_state_with(20).to_annotation();
    c.bench_function("node_state_parse_20_packages", |b| {
        b.iter(|| NodeState::parse(black_box(&annotation)))
    });
    let state = node_state_with(20);
    c.bench_function("node_state_serialize_20_packages", |b| {
        b.iter(|| black_box(&state).to_annotation())
    });
    let mut spec = NodeWrightSpec::default();
    for i in 0..20 {
        spec.packages.insert(
            format!("package-{i}"),
            Package {
                version: "1.0.0".into(),
                image: "ghcr.io/example/p".into(),
                ..Package::default()
            },
        );
    }
    let defaults = OperatorDefaults::default();
    c.bench_function("default_nodewright_20_packages", |b| {
        b.iter(|| {
            let mut s = spec.clone();
            default_nodewright(&mut s, &defaults)
        })
    });
}

criterion_group!(hot_paths, benches);
criterion_main!(hot_paths);
