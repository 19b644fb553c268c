//! Load generator for the webhook over real TLS: N concurrent keep-alive clients POST one
//! AdmissionReview body a fixed number of times; prints requests/s, latency percentiles, and how
//! many answers were errors (not 2xx) or refusals (`"allowed":false`, so a benchmark never
//! measures denials by mistake). Used by `tests/bench/webhook-load.sh`; a measurement, never a test.
//!
//! Usage: loadgen --url URL --ca CA.pem --body FILE --concurrency N --requests TOTAL
//!        loadgen --write-bodies DIR   (the bench bodies of `benches/common`, one
//!                                      `<endpoint>.json` per admission endpoint)

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../benches/common/mod.rs"]
mod common;

/// Writes the review each endpoint gets in the benchmarks.
fn write_bodies(dir: &str) -> Result<(), String> {
    for webhook in nodewright_webhook::admission::Webhook::ALL {
        let path = std::path::Path::new(dir).join(format!("{}.json", webhook.name()));
        std::fs::write(&path, common::body(webhook))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn arg(args: &[String], name: &str) -> Result<String, String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .ok_or_else(|| format!("missing {name}; usage: loadgen --url URL --ca CA --body FILE --concurrency N --requests TOTAL"))
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().collect();
    if let Ok(dir) = arg(&args, "--write-bodies") {
        return write_bodies(&dir);
    }
    let url = arg(&args, "--url")?;
    let ca = std::fs::read(arg(&args, "--ca")?).map_err(|e| format!("--ca: {e}"))?;
    let body = Arc::new(std::fs::read(arg(&args, "--body")?).map_err(|e| format!("--body: {e}"))?);
    let concurrency: usize = arg(&args, "--concurrency")?
        .parse()
        .map_err(|e| format!("--concurrency: {e}"))?;
    let total: usize = arg(&args, "--requests")?
        .parse()
        .map_err(|e| format!("--requests: {e}"))?;
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).map_err(|e| e.to_string())?)
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let per_worker = total.div_ceil(concurrency.max(1));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            let (mut errors, mut denied) = (0usize, 0usize);
            for _ in 0..per_worker {
                let t = Instant::now();
                let answer = match client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_vec())
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => r.bytes().await.ok(),
                    _ => None,
                };
                match answer {
                    Some(bytes) => {
                        latencies.push(t.elapsed());
                        if !contains(&bytes, br#""allowed":true"#) {
                            denied += 1;
                        }
                    }
                    None => errors += 1,
                }
            }
            (latencies, errors, denied)
        }));
    }
    let mut all = Vec::with_capacity(total);
    let (mut errors, mut denied) = (0, 0);
    for w in workers {
        let (l, e, d) = w.await.map_err(|e| e.to_string())?;
        all.extend(l);
        errors += e;
        denied += d;
    }
    let wall = started.elapsed();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "concurrency={concurrency} requests={} errors={errors} denied={denied} rps={:.0} p50={:.3}ms p99={:.3}ms max={:.3}ms",
        all.len(),
        all.len() as f64 / wall.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        all.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
