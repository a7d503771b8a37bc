fn main() -> anyhow::Result<()> {
    shared::shutdown::service_main(ws_node::config::Config::load(), ws_node::run)
}
