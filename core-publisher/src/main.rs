use clap::Parser;

fn main() -> anyhow::Result<()> {
    shared::shutdown::service_main(core_publisher::config::Config::parse(), core_publisher::run)
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
