//! Plain HTTP to an operator's admin server (`/readyz`, `/metrics`) on a local port, for the suites
//! that run the operator binary.

use std::time::Duration;

use nodewright_e2e::Cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path` over plain HTTP/1.0: (status code, body); `None` while nothing listens.
pub async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    get_with_token(port, path, None).await
}

/// Waits (up to `bound`) until the operator serving `port` reports that it leads.
pub async fn wait_leading(cluster: &Cluster, port: u16, bound: Duration) {
    cluster
        .wait_for("leadership", bound, || async {
            Ok(get(port, "/metrics")
                .await
                .filter(|(_, body)| body.contains("nodewright_operator_is_leader 1")))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// `GET path` with `Authorization: Bearer <token>` when given: (status code, body).
pub async fn get_with_token(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// `GET path` over a fresh HTTP/1.1 connection (`Connection: close`) to `addr`: the whole
/// response, status line and headers included.
pub async fn http11_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the admin server");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response");
    response
}

/// One plain HTTP/1.1 GET of `/metrics` on `addr` (an in-process operator's admin server): the
/// whole response, which must be a 200.
pub async fn scrape(addr: std::net::SocketAddr) -> String {
    let response = http11_get(addr, "/metrics").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the series whose line starts with `series` (name and labels, exactly).
pub fn series_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}
