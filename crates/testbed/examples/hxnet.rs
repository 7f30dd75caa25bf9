//! `hxcomm net` on its own (same arguments), for trying the testbed without building the rest:
//! `cargo run -p hx-testbed --example hxnet -- up --hosts 2 --rails 4`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "hxnet")]
struct Cli {
    #[command(flatten)]
    net: hx_testbed::NetArgs,
}

fn main() {
    std::process::exit(hx_testbed::run(Cli::parse().net));
}
