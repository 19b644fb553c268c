//! `nodewright-certs generate`: writes a CA and a serving certificate for a webhook served at the
//! given names, for the demo, for tests, and for the chart's "provided Secret" mode.
//!
//! Usage: nodewright-certs generate --dir DIR --name NAME [--name NAME...] [--days N]
//!        nodewright-certs --version
//! Writes DIR/ca.crt, DIR/ca.key, DIR/tls.crt, DIR/tls.key (keys mode 0600).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use nodewright_certs::CertificateAuthority;

const USAGE: &str = "usage: nodewright-certs generate --dir DIR --name NAME [--name NAME...] [--days N]\n       nodewright-certs --version";

/// Writes `text` to `path` through a new file created with its final mode (0600 for a private
/// key, 0644 otherwise) and renamed into place. Never chmod afterwards: a key written into an
/// existing or just-created readable file can be read between the write and the chmod, and by
/// anyone who opened (or hard-linked) that file before, whatever its mode becomes.
fn write(path: PathBuf, text: &str, private: bool) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{} is not a file path", path.display()))?;
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&temporary);
    let result = created
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, &path));
    result.map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        format!("cannot write {}: {e}", path.display())
    })
}

fn run(args: &[String]) -> Result<(), String> {
    let mut dir = None;
    let mut names = Vec::new();
    let mut days: u64 = 365;
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("generate") => {}
        Some("--version" | "-V") if args.len() == 1 => {
            println!("nodewright-certs {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        _ => return Err(USAGE.to_owned()),
    }
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        match flag.as_str() {
            "--dir" => dir = Some(PathBuf::from(value)),
            "--name" => names.push(value.clone()),
            "--days" => {
                days = value
                    .parse()
                    .ok()
                    .filter(|d| (1..=3650).contains(d))
                    .ok_or_else(|| {
                        format!("--days {value:?} must be a whole number from 1 to 3650")
                    })?
            }
            other => return Err(format!("unknown flag {other:?}; {USAGE}")),
        }
    }
    let dir = dir.ok_or_else(|| format!("--dir is required; {USAGE}"))?;
    if names.is_empty() {
        return Err(format!("at least one --name is required; {USAGE}"));
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let validity = Duration::from_secs(days * 86_400);
    let ca = CertificateAuthority::generate("nodewright-webhook-ca", validity)
        .map_err(|e| e.to_string())?;
    let leaf = ca
        .issue_serving(&names, validity)
        .map_err(|e| e.to_string())?;
    write(dir.join("ca.crt"), &ca.pem().cert_pem, false)?;
    write(dir.join("ca.key"), &ca.pem().key_pem, true)?;
    write(dir.join("tls.crt"), &leaf.cert_pem, false)?;
    write(dir.join("tls.key"), &leaf.key_pem, true)?;
    println!(
        "wrote {}/{{ca.crt,ca.key,tls.crt,tls.key}} for {}",
        dir.display(),
        names.join(", ")
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodewright-certs: {e}");
            ExitCode::from(2)
        }
    }
}
