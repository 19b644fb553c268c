//! kubectl's connection and impersonation flags (`--server`, `--token`,
//! `--certificate-authority`, `--insecure-skip-tls-verify`, `--tls-server-name`, `--as`,
//! `--as-group`) applied over the kubeconfig, with kubectl's precedence: a flag wins over what the
//! kubeconfig says, and `--server` works without a kubeconfig at all.

use kube::config::AuthInfo;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::args::Global;
use crate::error::CliError;

/// The flags' own consistency (kubectl refuses the same combination).
pub fn check(global: &Global) -> Result<(), CliError> {
    if global.insecure_skip_tls_verify && global.certificate_authority.is_some() {
        return Err(CliError::Usage(
            "--insecure-skip-tls-verify and --certificate-authority: specifying a root \
             certificates file with the insecure flag is not allowed; drop one"
                .to_owned(),
        ));
    }
    if !global.as_group.is_empty() && global.as_user.is_none() {
        return Err(CliError::Usage(
            "--as-group needs --as: impersonating groups without a user is not allowed".to_owned(),
        ));
    }
    Ok(())
}

/// The configuration to start from when no kubeconfig can be read: one for `--server` when it is
/// given (then a missing kubeconfig is no error), else `None`.
pub fn bare(global: &Global) -> Result<Option<kube::Config>, CliError> {
    global
        .server
        .as_deref()
        .map(|server| server_uri(server).map(kube::Config::new))
        .transpose()
}

fn server_uri(server: &str) -> Result<http::Uri, CliError> {
    let with_scheme = if server.contains("://") {
        server.to_owned()
    } else {
        format!("https://{server}")
    };
    with_scheme.parse::<http::Uri>().map_err(|e| {
        CliError::Usage(format!(
            "--server {server:?}: not a URL ({e}); e.g. https://10.0.0.1:6443"
        ))
    })
}

/// Applies the flags over `config` (read from the kubeconfig, or [`bare`]).
pub fn apply(global: &Global, config: &mut kube::Config) -> Result<(), CliError> {
    if let Some(server) = &global.server {
        config.cluster_url = server_uri(server)?;
    }
    if let Some(file) = &global.certificate_authority {
        let shown = file.display();
        let certs = CertificateDer::pem_file_iter(file)
            .map_err(|e| {
                CliError::Usage(format!(
                    "--certificate-authority {shown}: cannot read it: {e}"
                ))
            })?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                CliError::Usage(format!(
                    "--certificate-authority {shown}: not a PEM certificate file: {e}"
                ))
            })?;
        if certs.is_empty() {
            return Err(CliError::Usage(format!(
                "--certificate-authority {shown}: no certificate in it (expected PEM \
                 \"-----BEGIN CERTIFICATE-----\" blocks)"
            )));
        }
        config.root_cert = Some(certs.into_iter().map(|c| c.to_vec()).collect());
        config.root_cert_file = None;
        config.accept_invalid_certs = false;
    }
    if global.insecure_skip_tls_verify {
        config.accept_invalid_certs = true;
        config.root_cert = None;
        config.root_cert_file = None;
    }
    if let Some(name) = &global.tls_server_name {
        config.tls_server_name = Some(name.clone());
    }
    if let Some(token) = &global.token {
        // The token replaces the user's credentials (a client certificate, an exec plugin...).
        let impersonate = config.auth_info.impersonate.take();
        let groups = config.auth_info.impersonate_groups.take();
        config.auth_info = AuthInfo {
            token: Some(secrecy::SecretString::from(token.clone())),
            impersonate,
            impersonate_groups: groups,
            ..AuthInfo::default()
        };
    }
    if let Some(user) = &global.as_user {
        config.auth_info.impersonate = Some(user.clone());
        config.auth_info.impersonate_groups =
            (!global.as_group.is_empty()).then(|| global.as_group.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn global(args: &[&str]) -> Global {
        let mut all = vec!["kubectl-nodewright"];
        all.extend_from_slice(args);
        all.push("version");
        crate::args::Cli::try_parse_from(all).expect("args").global
    }

    #[test]
    fn flags_win_over_the_kubeconfig() {
        let g = global(&[
            "--server",
            "10.0.0.1:6443",
            "--token",
            "abc",
            "--tls-server-name",
            "kubernetes",
            "--as",
            "jane",
            "--as-group",
            "ops",
            "--as-group",
            "dev",
        ]);
        check(&g).expect("consistent");
        let mut config = bare(&g).expect("server").expect("a config");
        apply(&g, &mut config).expect("applied");
        assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(config.tls_server_name.as_deref(), Some("kubernetes"));
        assert_eq!(config.auth_info.impersonate.as_deref(), Some("jane"));
        assert_eq!(
            config.auth_info.impersonate_groups,
            Some(vec!["ops".to_owned(), "dev".to_owned()])
        );
        assert!(config.auth_info.token.is_some());
    }

    #[test]
    fn inconsistent_or_bad_flags_are_refused_by_name() {
        let ca = std::env::temp_dir().join(format!("nw-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, "not pem").expect("file");
        let both = global(&[
            "--insecure-skip-tls-verify",
            "--certificate-authority",
            &ca.display().to_string(),
        ]);
        assert!(check(&both).is_err_and(|e| e.to_string().contains("insecure flag")));
        let groups = global(&["--as-group", "ops"]);
        assert!(check(&groups).is_err_and(|e| e.to_string().contains("--as-group needs --as")));
        let bad_ca = global(&["--certificate-authority", &ca.display().to_string()]);
        let mut config = kube::Config::new("https://127.0.0.1".parse().expect("uri"));
        assert!(
            apply(&bad_ca, &mut config)
                .is_err_and(|e| e.to_string().contains("--certificate-authority"))
        );
        let _ = std::fs::remove_file(&ca);
        let bad_server = global(&["--server", "https://exa mple"]);
        assert!(bare(&bad_server).is_err_and(|e| e.to_string().contains("--server")));
    }
}
