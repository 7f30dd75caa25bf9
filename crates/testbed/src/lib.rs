//! `hxcomm net`: the emulated cluster (network namespaces, rate-limited rails).

/// Arguments of `hxcomm net`.
#[derive(clap::Args, Debug)]
pub struct NetArgs {
    #[arg(trailing_var_arg = true)]
    pub rest: Vec<String>,
}

/// Runs a `net` subcommand; returns the process exit code.
pub fn run(_args: NetArgs) -> i32 {
    eprintln!("hxcomm net: not implemented yet");
    2
}
