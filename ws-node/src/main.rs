use clap::Parser;
use ws_node::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    if config.check_config {
        println!("{config:#?}");
        return Ok(());
    }
    shared::telemetry::init();
    let shutdown = shared::shutdown::signal_token();
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    ws_node::run(config, listener, shutdown).await
}
