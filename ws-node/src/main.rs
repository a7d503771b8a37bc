use clap::Parser;

fn main() -> anyhow::Result<()> {
    shared::shutdown::service_main(ws_node::config::Config::parse(), ws_node::run)
}
