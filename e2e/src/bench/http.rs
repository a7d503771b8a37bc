//! The load generator's HTTP client: keep-alive HTTP/1.1 connections to one host, one request at
//! a time on each, reused last-in first-out (hyper's client connection, no general-purpose pool).
//!
//! Why not reqwest, which the rest of the harness uses: at 10,000 requests/s on this 2-core machine
//! the bench's reqwest client took 60–69 % of a core (URL parsing, a timer, a `serde_json::Value`
//! body and a pool checkout per request), CPU taken from the system it measures. This client
//! writes each request as one pre-built body and reads the answer into bytes; it does the same
//! HTTP/1.1 exchange over the same kind of pooled connection.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use std::sync::Mutex;
use std::time::Duration;

/// Connections to one `http://host:port` origin.
pub struct LeanHttp {
    /// `host:port`, for connecting and for the Host header.
    authority: String,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl LeanHttp {
    /// A client for `base` (`http://host:port`, no path); connects lazily.
    ///
    /// Errors: `base` is not a plain `http://` origin.
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let authority = base.strip_prefix("http://").ok_or_else(|| anyhow::anyhow!("{base}: only http:// origins"))?;
        anyhow::ensure!(!authority.is_empty() && !authority.contains('/'), "{base}: expected http://host:port");
        Ok(Self { authority: authority.to_owned(), idle: Mutex::new(Vec::new()) })
    }

    async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = tokio::net::TcpStream::connect(&self.authority).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// `POST path` with a JSON `body`; (status, response body). A connection that fails is
    /// dropped, not reused; an idle one the server closed meanwhile is replaced once.
    ///
    /// Errors: connecting, writing or reading failed, or no answer within `timeout`.
    pub async fn post_json(&self, path: &str, body: Bytes, timeout: Duration) -> anyhow::Result<(u16, Bytes)> {
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let exchange = async {
            let idle = self.idle.lock().expect("idle lock").pop();
            let reusable = match idle {
                Some(mut s) if !s.is_closed() => s.ready().await.is_ok().then_some(s),
                _ => None,
            };
            let mut sender = match reusable {
                Some(s) => s,
                None => {
                    let mut s = self.connect().await?;
                    s.ready().await?;
                    s
                }
            };
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await?.to_bytes();
            self.idle.lock().expect("idle lock").push(sender);
            anyhow::Ok((status, body))
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| anyhow::anyhow!("POST {path}: no answer in {timeout:?}"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_origins() {
        assert!(LeanHttp::new("http://127.0.0.1:8080").is_ok());
        assert!(LeanHttp::new("https://127.0.0.1:8080").is_err());
        assert!(LeanHttp::new("http://127.0.0.1:8080/x").is_err());
        assert!(LeanHttp::new("http://").is_err());
    }

    /// An echo server (201 + the request body) on a loopback port that closes each connection
    /// after one answer unless `keep_alive`; (its address, connections accepted so far).
    async fn echo_server(keep_alive: bool) -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let conns = Arc::new(AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counted = conns.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    // Echoes the body with 201 Created.
                    let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        let mut resp = hyper::Response::new(Full::new(body));
                        *resp.status_mut() = hyper::StatusCode::CREATED;
                        Ok::<_, hyper::Error>(resp)
                    });
                    let _ = hyper::server::conn::http1::Builder::new().keep_alive(keep_alive).serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
                });
            }
        });
        (addr, conns)
    }

    async fn five_echoes(http: &LeanHttp) {
        for i in 0..5 {
            let (status, body) = http.post_json("/echo", Bytes::from(format!("{{\"n\":{i}}}")), Duration::from_secs(5)).await.unwrap();
            assert_eq!(status, 201);
            assert_eq!(&body[..], format!("{{\"n\":{i}}}").as_bytes());
        }
    }

    /// Round trips against a real HTTP server, connections reused.
    #[tokio::test]
    async fn posts_and_reuses_connections() {
        let (addr, conns) = echo_server(true).await;
        five_echoes(&LeanHttp::new(&format!("http://{addr}")).unwrap()).await;
        assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 1, "sequential requests share one keep-alive connection");
    }

    /// A server that closes connections after each answer: every request still succeeds, each on
    /// a new connection (a closed idle connection is replaced, not reported as a failure).
    #[tokio::test]
    async fn connections_the_server_closed_are_replaced() {
        let (addr, conns) = echo_server(false).await;
        five_echoes(&LeanHttp::new(&format!("http://{addr}")).unwrap()).await;
        assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 5);
    }
}
