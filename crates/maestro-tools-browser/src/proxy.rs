//! The guard proxy: an HTTP proxy on 127.0.0.1 (plain requests and `CONNECT` tunnels) that
//! Chromium sends every request through, and that applies the SSRF guard of
//! `maestro-tools-web` to each one.
//!
//! The proxy resolves the host itself with the guard's resolver, checks every address it got
//! with the guard's [`HostPolicy`], and connects to one of those checked addresses: a name that
//! answers a public address to the check and a private one to the connection (DNS rebinding)
//! cannot slip through, because there is only one answer. A refused request gets
//! `403 Forbidden` with the reason, and is recorded so that the tool can name it.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_tools_web::guard::Blocked;
use maestro_tools_web::{HostLookup, HostPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Largest request head (request line and headers) the proxy reads.
const MAX_HEAD: usize = 64 * 1024;
/// Time to connect to a checked address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One request the guard refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// What was asked for: `host:port` of a tunnel, or the URL of a plain request.
    pub(crate) target: String,
    /// Why, as a sentence (the guard's own words).
    pub(crate) reason: String,
}

/// Who may be reached: the guard's policy, plus `host:port` exceptions that allow one port
/// only (`web.allow_hosts` entries such as `127.0.0.1:8080`).
#[derive(Clone)]
pub(crate) struct ProxyPolicy {
    pub(crate) policy: Arc<HostPolicy>,
    pub(crate) lookup: Arc<dyn HostLookup>,
    /// Lower-case host (without brackets) and port.
    pub(crate) ports: Vec<(String, u16)>,
}

impl std::fmt::Debug for ProxyPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyPolicy")
            .field("policy", &self.policy)
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

/// An `allow_hosts` entry of the form `host:port` or `[v6]:port`, if it is one.
pub(crate) fn host_port(entry: &str) -> Option<(String, u16)> {
    let entry = entry.trim();
    let (host, port) = entry.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6,
        None if host.contains(':') => return None,
        None => host,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

impl ProxyPolicy {
    /// The checked addresses to connect to for `host` (a name or an address literal) and
    /// `port`, or why not.
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => self
                .lookup
                .lookup(&host)
                .await
                .map_err(|e| format!("{host} did not resolve: {e}"))?,
        };
        if ips.is_empty() {
            return Err(format!("{host} did not resolve to any address"));
        }
        let exempt = self.ports.iter().any(|(h, p)| *h == host && *p == port);
        if !exempt {
            self.policy.check(&host, &ips).map_err(|blocked: Blocked| {
                format!(
                    "{blocked}; private, loopback and metadata addresses are not reachable \
                     from the browser"
                )
            })?;
        }
        Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }
}

/// The running proxy; it stops, with every connection it carries, when dropped.
#[derive(Debug)]
pub(crate) struct GuardProxy {
    addr: SocketAddr,
    refusals: Arc<Mutex<Vec<Refusal>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GuardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GuardProxy {
    /// Listens on a free port of 127.0.0.1.
    pub(crate) async fn start(policy: ProxyPolicy) -> std::io::Result<GuardProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let refusals = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&refusals);
        let task = tokio::spawn(async move {
            // Dropping the set (when the task is aborted) aborts every connection.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let policy = policy.clone();
                        let recorded = Arc::clone(&recorded);
                        connections.spawn(async move {
                            if let Err(e) = serve(stream, &policy, &recorded).await {
                                tracing::debug!("browser proxy connection: {e}");
                            }
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(GuardProxy {
            addr,
            refusals,
            task,
        })
    }

    /// Where Chromium sends its requests.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The refusals recorded since the last call, oldest first.
    pub(crate) fn take_refusals(&self) -> Vec<Refusal> {
        match self.refusals.lock() {
            Ok(mut list) => std::mem::take(&mut *list),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }
}

/// Serves one client connection: one request, or one tunnel.
async fn serve(
    mut client: TcpStream,
    policy: &ProxyPolicy,
    refusals: &Mutex<Vec<Refusal>>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(end) = find_head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return respond(&mut client, "431 Request Header Fields Too Large", "").await;
        }
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let rest = buf[head_end..].to_vec();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return respond(&mut client, "400 Bad Request", "malformed request line").await;
    };

    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = authority(target) else {
            return respond(&mut client, "400 Bad Request", "CONNECT needs host:port").await;
        };
        let mut upstream = match connect(policy, &host, port).await {
            Ok(upstream) => upstream,
            Err(reason) => {
                refuse(refusals, target, &reason);
                return respond(&mut client, "403 Forbidden", &reason).await;
            }
        };
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        if !rest.is_empty() {
            upstream.write_all(&rest).await?;
        }
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }

    let Ok(url) = url::Url::parse(target) else {
        return respond(&mut client, "400 Bad Request", "expected an absolute URL").await;
    };
    if url.scheme() != "http" {
        let reason = format!("only http requests are proxied without CONNECT, not {url}");
        return respond(&mut client, "400 Bad Request", &reason).await;
    }
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return respond(&mut client, "400 Bad Request", "the URL has no host").await;
    };
    let mut upstream = match connect(policy, host, port).await {
        Ok(upstream) => upstream,
        Err(reason) => {
            refuse(refusals, url.as_str(), &reason);
            return respond(&mut client, "403 Forbidden", &reason).await;
        }
    };
    let mut path = url.path().to_string();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let mut forwarded = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("").trim();
        if [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        forwarded.push_str(line);
        forwarded.push_str("\r\n");
    }
    // One request per connection: a later request on this connection may name another host.
    forwarded.push_str("Connection: close\r\n\r\n");
    upstream.write_all(forwarded.as_bytes()).await?;
    if !rest.is_empty() {
        upstream.write_all(&rest).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Resolves and checks `host`, then connects to the first checked address that answers.
async fn connect(policy: &ProxyPolicy, host: &str, port: u16) -> Result<TcpStream, String> {
    let addrs = policy.resolve(host, port).await?;
    let mut last = String::from("no address");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer within {}s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    Err(format!("could not connect to {host}:{port} ({last})"))
}

fn refuse(refusals: &Mutex<Vec<Refusal>>, target: &str, reason: &str) {
    // Only the guard's refusals are recorded: an unreachable public host is not one.
    if !reason.contains("refused to connect") {
        return;
    }
    let refusal = Refusal {
        target: target.to_string(),
        reason: reason.to_string(),
    };
    match refusals.lock() {
        Ok(mut list) => list.push(refusal),
        Err(poisoned) => poisoned.into_inner().push(refusal),
    }
}

/// `host:port` of a CONNECT target (`[v6]:port` for IPv6).
fn authority(target: &str) -> Option<(String, u16)> {
    let url = url::Url::parse(&format!("http://{target}")).ok()?;
    let host = url.host_str()?.to_string();
    let port = url.port_or_known_default()?;
    Some((host, port))
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

async fn respond(client: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(text.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn host_port_exceptions() {
        assert_eq!(
            host_port("127.0.0.1:8080"),
            Some(("127.0.0.1".into(), 8080))
        );
        assert_eq!(host_port("[::1]:80"), Some(("::1".into(), 80)));
        assert_eq!(host_port("Wiki.LAN:81"), Some(("wiki.lan".into(), 81)));
        assert_eq!(host_port("::1"), None);
        assert_eq!(host_port("10.1.0.0/16"), None);
        assert_eq!(host_port("wiki.lan"), None);
    }
}
