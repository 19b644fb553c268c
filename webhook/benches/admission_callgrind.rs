//! Instruction counts of the webhook's per-request work (what `benches/admission.rs` times), for
//! `valgrind --tool=callgrind`: counts do not move with other load on the machine, so before/after
//! comparisons hold on a shared host. `webhook/benches/callgrind.sh` runs it and prints instructions
//! per request for every endpoint.
//!
//! Usage: `admission_callgrind [ENDPOINT [ITERATIONS]]`. Only [`measured`] is meant to be counted
//! (`--toggle-collect`); one warm-up request runs before it, so one-time work (regexes compiled on
//! first use) is left out. Without arguments (as `cargo bench` runs it) every endpoint runs briefly
//! and the wall time per request is printed.

mod common;

use std::hint::black_box;
use std::time::Instant;

use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::admission::{Webhook, review};
use nodewright_webhook::cache::StaticView;

/// The counted region: `iterations` requests, each decoded, admitted and encoded.
#[inline(never)]
fn measured(
    webhook: Webhook,
    body: &[u8],
    iterations: u32,
    defaults: &OperatorDefaults,
    view: &StaticView,
) -> usize {
    let mut bytes = 0;
    for _ in 0..iterations {
        let answer = review(webhook, black_box(body), defaults, view);
        bytes += answer.to_json().map(|b| b.len()).unwrap_or_default();
    }
    bytes
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let selected: Vec<Webhook> = match args.first() {
        Some(name) => match Webhook::ALL.into_iter().find(|w| w.name() == name) {
            Some(w) => vec![w],
            None => {
                eprintln!(
                    "unknown endpoint {name:?}; use one of {:?}",
                    Webhook::ALL.map(Webhook::name)
                );
                std::process::exit(2);
            }
        },
        None => Webhook::ALL.to_vec(),
    };
    let iterations: u32 = match args.get(1).map(|n| n.parse()) {
        None => 1000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("ITERATIONS: {e}");
            std::process::exit(2);
        }
    };
    let defaults = OperatorDefaults::default();
    let view = StaticView {
        policies: vec!["policy".into()],
        users: vec![],
        ..StaticView::default()
    };
    for webhook in selected {
        let body = common::body(webhook);
        let _ = review(webhook, &body, &defaults, &view).to_json();
        let started = Instant::now();
        let bytes = measured(webhook, &body, iterations, &defaults, &view);
        let per = started.elapsed() / iterations.max(1);
        println!(
            "{}: {iterations} requests of {} bytes, {:.1} µs each, {} response bytes",
            webhook.name(),
            body.len(),
            per.as_secs_f64() * 1e6,
            bytes / iterations.max(1) as usize
        );
    }
}
