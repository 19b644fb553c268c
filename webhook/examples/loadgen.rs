//! Load generator for the webhook over real TLS: N concurrent keep-alive clients POST one
//! AdmissionReview body a fixed number of times; prints requests/s and latency percentiles.
//! Used by `tests/bench/webhook-load.sh`; a measurement, never a test.
//!
//! Usage: loadgen --url URL --ca CA.pem --body FILE --concurrency N --requests TOTAL

use std::sync::Arc;
use std::time::{Duration, Instant};

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
            let mut errors = 0usize;
            for _ in 0..per_worker {
                let t = Instant::now();
                let ok = match client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_vec())
                    .send()
                    .await
                {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    latencies.push(t.elapsed());
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    let mut all = Vec::with_capacity(total);
    let mut errors = 0;
    for w in workers {
        let (l, e) = w.await.map_err(|e| e.to_string())?;
        all.extend(l);
        errors += e;
    }
    let wall = started.elapsed();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "concurrency={concurrency} requests={} errors={errors} rps={:.0} p50={:.3}ms p99={:.3}ms max={:.3}ms",
        all.len(),
        all.len() as f64 / wall.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        all.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    Ok(())
}
