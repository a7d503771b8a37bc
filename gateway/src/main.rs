fn main() -> anyhow::Result<()> {
    shared::shutdown::service_main(gateway::config::Config::load(), gateway::run)
}
