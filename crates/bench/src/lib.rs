//! `hxcomm bench`: OSU-style point-to-point benchmarks.

/// Arguments of `hxcomm bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(trailing_var_arg = true)]
    pub rest: Vec<String>,
}

/// Runs a benchmark; returns the process exit code.
pub fn run(_args: BenchArgs) -> i32 {
    eprintln!("hxcomm bench: not implemented yet");
    2
}
