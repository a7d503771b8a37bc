//! Shared by the gateway's integration tests: a router served on a loopback port.

/// Serves `app` on a free loopback port until the returned guard drops; its base URL.
pub async fn on_loopback(app: axum::Router) -> (String, tokio_util::sync::DropGuard) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let cancelled = stop.clone().cancelled_owned();
    tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(cancelled).await });
    (url, stop.drop_guard())
}
