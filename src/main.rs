use std::io::IsTerminal;

use clap::Parser;
use dispatch::{cli, config::Config};
use tracing_subscriber::EnvFilter;

/// Many small short-lived allocations per delivery (requests, envelopes,
/// futures): mimalloc serves them from per-thread pages, where glibc's
/// allocator spent a fifth of the service's CPU in a burst.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    init_tracing(args.config.as_deref());
    match cli::run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dispatch: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing(config_file: Option<&std::path::Path>) {
    let (format, filter) = match Config::load(config_file) {
        Ok(c) => (c.log.format, c.log.filter),
        Err(_) => ("pretty".into(), "info".into()),
    };
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(filter));
    // Colours only for a person at a terminal: a file or a log collector
    // gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
