//! `hxcomm run`: starts ranks, runs the bootstrap service, forwards output, stops the job on failure.

/// Arguments of `hxcomm run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np")]
    pub ranks: u32,
    /// Program and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    pub program: Vec<String>,
}

/// Runs a job; returns the process exit code.
pub fn run(_args: RunArgs) -> i32 {
    eprintln!("hxcomm run: not implemented yet");
    2
}
