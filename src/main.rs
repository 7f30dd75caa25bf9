//! The `hxcomm` command: a thin shell over the library crates.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "hxcomm",
    version,
    about = "Multi-rail communication layer for commodity clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start N ranks of a program (the launcher).
    Run(hx_launcher::RunArgs),
    /// Manage the emulated cluster (network namespaces with rate-limited rails).
    Net(hx_testbed::NetArgs),
    /// Point-to-point benchmarks, run as ranks under `hxcomm run`.
    Bench(hx_bench::BenchArgs),
    /// The main job in one command: testbed, every policy over 1/2/4 rails, report.
    Demo(hx_demo::DemoArgs),
    /// The per-host agent of `hxcomm run --hosts/--hostfile`, started by it over ssh; reads its
    /// job from stdin.
    #[command(hide = true)]
    RunAgent,
}

fn main() {
    hx_engine::init_logging();
    let code = match Cli::parse().command {
        Command::Run(a) => hx_launcher::run(a),
        Command::Net(a) => hx_testbed::run(a),
        Command::Bench(a) => hx_bench::run(a),
        Command::Demo(a) => hx_demo::run(a),
        Command::RunAgent => hx_launcher::run_agent(),
    };
    std::process::exit(code);
}
