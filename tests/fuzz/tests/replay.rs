//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`, minimized with `cargo fuzz cmin`)
//! and every input that once failed (`fuzz/regressions/<target>/`) through the same property
//! functions libFuzzer runs, on stable, so CI guards what the fuzzers found without a nightly
//! toolchain. A failing input is named by its file.

use std::path::PathBuf;

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(kind)
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.is_file());
    files.sort();
    files
}

fn replay(target: &str, property: fn(&[u8])) {
    let corpus = inputs("corpus", target);
    assert!(
        corpus.len() >= 10,
        "fuzz/corpus/{target} holds {} inputs: the committed corpus is missing",
        corpus.len()
    );
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&inputs("regressions", target)) {
        let data = std::fs::read(path).expect("corpus file");
        if std::panic::catch_unwind(|| property(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: failing inputs:\n{}",
        failed.join("\n")
    );
}

#[test]
fn admission_corpus_replays() {
    replay("admission", nodewright_fuzz::admission);
}

#[test]
fn node_plan_corpus_replays() {
    replay("node_plan", nodewright_fuzz::node_plan);
}

#[test]
fn every_target_has_a_corpus_test() {
    let names: Vec<&str> = nodewright_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["admission", "node_plan"]);
}

/// A short seeded random run on stable (xorshift, seed printed): not coverage-guided like
/// libFuzzer, but it exercises the properties on inputs nobody committed, in every CI run.
#[test]
fn seeded_random_inputs_hold_the_properties() {
    let seed: u64 = std::env::var("NODEWRIGHT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    eprintln!("seed {seed} (NODEWRIGHT_FUZZ_SEED to reproduce)");
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (target, property) in nodewright_fuzz::TARGETS {
        for i in 0..2_000 {
            let len = (next() % 256) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if std::panic::catch_unwind(|| property(&data)).is_err() {
                panic!("{target}: random input {i} of seed {seed} fails: {data:?}");
            }
        }
    }
}
