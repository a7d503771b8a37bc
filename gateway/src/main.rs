use clap::Parser;
use gateway::config::Config;

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
    gateway::run(config, listener, shutdown).await
}
