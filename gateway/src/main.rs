use clap::Parser;

fn main() -> anyhow::Result<()> {
    shared::shutdown::service_main(gateway::config::Config::parse(), gateway::run)
}
