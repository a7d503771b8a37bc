use clap::Parser;
use ws_node::config::Config;

fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let problems = config.problems();
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        std::process::exit(2);
    }
    if config.check_config {
        println!("{}", config.describe());
        return Ok(());
    }
    shared::shutdown::run_main(async move {
        shared::telemetry::init();
        let shutdown = shared::shutdown::signal_token();
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        ws_node::run(config, listener, shutdown).await
    })
}
