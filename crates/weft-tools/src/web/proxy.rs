//! The guard in front of every connection the browser makes: Chromium is told to use this
//! local forward proxy for everything (loopback included), so pages, pop-ups, workers,
//! WebSockets, beacons and redirects all arrive here, whatever created them. Each target is
//! resolved and checked by the [`NetPolicy`] and the connection goes to exactly the checked
//! addresses; a refused one gets `403` and never leaves the machine.
//!
//! `CONNECT host:port` (HTTPS and WebSockets) becomes a checked tunnel; a plain-HTTP request
//! in absolute form is sent on to its origin with `Connection: close` and relayed back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::guard::NetPolicy;

/// The longest request head the proxy reads.
const MAX_HEAD_BYTES: usize = 32 * 1024;
/// How long a client may take to send its request head, and a target to accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running proxy; it stops when dropped.
pub struct GuardProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for GuardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GuardProxy {
    /// Listen on a free loopback port.
    pub async fn start(policy: Arc<NetPolicy>) -> std::io::Result<GuardProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let policy = policy.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(client, &policy).await {
                        tracing::debug!(error = %e, "browser proxy connection ended");
                    }
                });
            }
        });
        Ok(GuardProxy { addr, task })
    }

    /// `http://127.0.0.1:<port>`, for Chromium's `--proxy-server`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A request head: its first line's parts, its header lines, and what came after it.
struct Head {
    method: String,
    target: String,
    version: String,
    headers: Vec<String>,
    rest: Vec<u8>,
}

async fn serve(mut client: TcpStream, policy: &NetPolicy) -> std::io::Result<()> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) | Err(_) => return Ok(()),
        Ok(Err(e)) => return Err(e),
    };
    let (host, port) = match target_of(&head) {
        Ok(target) => target,
        Err(why) => return refuse(&mut client, 400, &why).await,
    };
    let addrs = match policy.resolve(&host, port).await {
        Ok(addrs) => addrs,
        Err(why) => {
            tracing::info!(%host, port, "browser connection refused by the network guard");
            return refuse(&mut client, 403, &why).await;
        }
    };
    let Some(mut upstream) = connect(&addrs).await else {
        return refuse(&mut client, 502, &format!("cannot reach {host}:{port}")).await;
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
    } else {
        upstream.write_all(&origin_form(&head)?).await?;
    }
    upstream.write_all(&head.rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Read up to the blank line ending the head; `None` if the client left first.
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<Head>> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(at) = find(&buf, b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(std::io::Error::other("request head too long"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, target, version) = (
        first.next().unwrap_or_default().to_owned(),
        first.next().unwrap_or_default().to_owned(),
        first.next().unwrap_or("HTTP/1.1").to_owned(),
    );
    Ok(Some(Head {
        method,
        target,
        version,
        headers: lines.map(str::to_owned).collect(),
        rest: buf[end + 4..].to_vec(),
    }))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Where the client wants to go: `host:port` of a CONNECT, or an `http://` URL's.
fn target_of(head: &Head) -> Result<(String, u16), String> {
    let url = if head.method.eq_ignore_ascii_case("CONNECT") {
        url::Url::parse(&format!("http://{}", head.target))
    } else {
        url::Url::parse(&head.target)
    }
    .map_err(|_| format!("not a target the proxy takes: {}", head.target))?;
    if !head.method.eq_ignore_ascii_case("CONNECT") && !matches!(url.scheme(), "http" | "ws") {
        return Err(format!(
            "only http through the proxy, not {}:",
            url.scheme()
        ));
    }
    let host = url.host_str().ok_or("the target has no host")?.to_owned();
    let port = url
        .port_or_known_default()
        .or_else(|| (url.scheme() == "ws").then_some(80))
        .ok_or("the target has no port")?;
    Ok((host, port))
}

/// The request as its origin takes it: the path alone, no proxy headers, one exchange.
fn origin_form(head: &Head) -> std::io::Result<Vec<u8>> {
    let url = url::Url::parse(&head.target).map_err(std::io::Error::other)?;
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let upgrade = head
        .headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("upgrade:"));
    let mut out = format!("{} {} {}\r\n", head.method, path, head.version);
    for header in &head.headers {
        let name = header
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if name.starts_with("proxy-") || (name == "connection" && !upgrade) {
            continue;
        }
        out.push_str(header);
        out.push_str("\r\n");
    }
    if !upgrade {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    Ok(out.into_bytes())
}

/// The first of the checked addresses that answers.
async fn connect(addrs: &[SocketAddr]) -> Option<TcpStream> {
    for addr in addrs {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await
        {
            return Some(stream);
        }
    }
    None
}

async fn refuse(client: &mut TcpStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("refused by Weft's network guard: {why}\n");
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(answer.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, target: &str) -> Head {
        Head {
            method: method.into(),
            target: target.into(),
            version: "HTTP/1.1".into(),
            headers: vec![
                "Host: example.com".into(),
                "Proxy-Connection: keep-alive".into(),
                "Connection: keep-alive".into(),
            ],
            rest: Vec::new(),
        }
    }

    #[test]
    fn targets_of_connect_and_absolute_requests() {
        assert_eq!(
            target_of(&head("CONNECT", "example.com:443")).unwrap(),
            ("example.com".to_owned(), 443)
        );
        assert_eq!(
            target_of(&head("CONNECT", "[::1]:8080")).unwrap(),
            ("[::1]".to_owned(), 8080)
        );
        assert_eq!(
            target_of(&head("GET", "http://example.com/a?b")).unwrap(),
            ("example.com".to_owned(), 80)
        );
        assert!(target_of(&head("GET", "/relative")).is_err());
        assert!(target_of(&head("GET", "ftp://example.com/")).is_err());
    }

    #[test]
    fn requests_go_on_in_origin_form_without_proxy_headers() {
        let out = String::from_utf8(origin_form(&head("GET", "http://example.com/a?b=1")).unwrap())
            .unwrap();
        assert_eq!(
            out,
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
        );
    }
}
