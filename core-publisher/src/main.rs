fn main() -> anyhow::Result<()> {
    shared::shutdown::service_main(core_publisher::config::Config::load(), core_publisher::run)
}

/// mimalloc instead of glibc's malloc: at 10,000 requests/s glibc's malloc and free were 16 % of
/// the publisher's worker samples (`perf record`); with mimalloc the publisher used about 10 % less
/// CPU for the same load (docs/benchmarks.md, ninth run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
