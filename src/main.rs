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
    /// Hyper-crossbar topologies: the address plan, and one host's addresses, routes, sysctls.
    Topo(hx_topology::cli::TopoArgs),
    /// What this host would use (rails, shared memory) and why, and every setting with its
    /// value and where it came from.
    Info,
    /// The per-host agent of `hxcomm run --hosts/--hostfile`, started by it over ssh; reads its
    /// job from stdin.
    #[command(hide = true)]
    RunAgent,
}

/// The commands that only print: like other Unix tools they end quietly when the reader of
/// their output goes away (`hxcomm net status | head`) instead of failing on EPIPE. The others
/// run the engine, whose sockets must see EPIPE as an error, not a signal.
fn die_on_sigpipe() {
    // SAFETY: resetting a signal's disposition to the default, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    hx_engine::init_logging();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Net(_) | Command::Topo(_) | Command::Info
    ) {
        die_on_sigpipe();
    }
    let code = match cli.command {
        Command::Run(a) => hx_launcher::run(a),
        Command::Net(a) => hx_testbed::run(a),
        Command::Bench(a) => hx_bench::run(a),
        Command::Demo(a) => hx_demo::run(a),
        Command::Topo(a) => hx_topology::cli::run(a),
        Command::RunAgent => hx_launcher::run_agent(),
        Command::Info => match hx_engine::info::report(&|k| std::env::var(k).ok()) {
            Ok(r) => {
                print!("{r}");
                0
            }
            Err(e) => {
                eprintln!("hxcomm info: {e}");
                2
            }
        },
    };
    std::process::exit(code);
}
