//! Every docs page's tested examples (```` ```yaml apply ````, ```` ```sh test ````,
//! ```` ```text expect ```` ...; `nodewright_docs::pages`) run, in page order, on one example
//! cluster: the local control plane with an operator and a webhook (`nodewright_docs::harness`).
//! A page whose commands or outputs no longer hold fails here, naming the page and the line.

use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_runs() {
    // Captured with the test's output (shown when it fails): the in-process operator's and
    // webhook's warnings, and the webhook's reasons for leaving out a blast-radius warning (a page
    // once missed one under load; the reason was never seen).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,nodewright_webhook::rules=debug".into()),
        )
        .with_test_writer()
        .try_init();
    let started = Instant::now();
    let env = nodewright_docs::harness::Env::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let setup = started.elapsed();
    let root = nodewright_docs::repo_dir().join("docs");
    let mut pages: Vec<_> = std::fs::read_dir(&root)
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    // The metrics reference last: its example reads what the other pages' stages produced.
    pages.push(root.join("reference/metrics.md"));
    // While writing a page: NODEWRIGHT_DOCS_PAGES=rollout.md,status.md runs only those.
    let only: Vec<String> = std::env::var("NODEWRIGHT_DOCS_PAGES")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    if !only.is_empty() {
        pages.retain(|p| {
            p.file_name()
                .is_some_and(|f| only.iter().any(|o| *o == f.to_string_lossy()))
        });
        eprintln!("docs: only {only:?} (NODEWRIGHT_DOCS_PAGES)");
    }
    let mut ran = 0;
    for page in &pages {
        match env.run_page(page).await {
            Ok(took) => {
                ran += 1;
                eprintln!("docs: {} ran in {:.1}s", page.display(), took.as_secs_f64());
            }
            Err(e) => {
                env.stop();
                panic!("{e}\n(cluster logs: {})", env.cluster.describe());
            }
        }
    }
    env.stop();
    eprintln!(
        "docs: {ran} pages in {:.1}s ({:.1}s to start the example cluster)",
        started.elapsed().as_secs_f64(),
        setup.as_secs_f64()
    );
    assert!(
        only.is_empty() || ran == only.len(),
        "ran {ran} of {only:?}"
    );
    assert!(!only.is_empty() || ran >= 13, "only {ran} pages");
}
