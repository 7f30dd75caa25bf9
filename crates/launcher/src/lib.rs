//! `hxcomm run`: starts ranks, runs the bootstrap service, forwards output, stops the job on failure.
//!
//! Why it is built this way: the launcher is a plain process supervisor plus the bootstrap
//! service. Arguments are turned into a checked [`plan`] before anything starts; the job's secret
//! and the service's address reach the ranks in the environment, which is how `hx_bootstrap::from_env`
//! finds them, so a different bootstrap (PMI, ssh) only changes this crate and that function, never
//! the engine. Supervision (`job`) favours "no orphans, ever" over everything else: own process
//! groups, a parent-death signal, and a kill of every group on the way out.
//!
//! Exit codes: 0 if all ranks exit 0; else the first failing rank's status (128+signal for a
//! signal); 130/143 when the launcher gets SIGINT/SIGTERM; 124 when `--timeout` expires; 2 for bad
//! arguments or a missing testbed; 127 when the program cannot be found.

pub mod agent;
mod bind;
pub mod hosts;
mod job;
mod output;
pub mod plan;
mod remote;
mod signals;
mod watchdog;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use agent::run_agent;
pub use job::{GRACE, TIMEOUT_EXIT};
pub use output::Sink;
pub use plan::POLICIES;

/// The default `--rsh`.
pub const DEFAULT_RSH: &str = "ssh -o BatchMode=yes";

/// Arguments of `hxcomm run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np")]
    pub ranks: u32,
    /// Run rank i in testbed host PREFIX(i mod H) (network namespaces; needs root).
    #[arg(long)]
    pub net: bool,
    /// Testbed name prefix: namespaces PREFIX0, PREFIX1, ... and interface PREFIX-mgmt.
    #[arg(long, value_name = "PREFIX", default_value = "hx")]
    pub name: String,
    /// With --net: put K consecutive ranks on each host (rank i on host i / K).
    #[arg(long, value_name = "K")]
    pub ranks_per_host: Option<u32>,
    /// With --net: use only these testbed hosts, in this order (e.g. `0,7`: opposite corners
    /// of a 2x2x2 hyper-crossbar); rank i goes to the (i mod count)-th of them.
    #[arg(long, value_name = "H,H,...", value_delimiter = ',')]
    pub net_hosts: Option<Vec<u32>>,
    /// Rail scheduling policy for the ranks (HX_POLICY).
    #[arg(long, value_name = "P", value_parser = POLICIES)]
    pub policy: Option<String>,
    /// Prefix every line of output with `[rank] `.
    #[arg(long)]
    pub tag_output: bool,
    /// Extra environment variable for every rank (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Stop the job after this many seconds (exit code 124).
    #[arg(long, value_name = "SECONDS", env = "HX_JOB_TIMEOUT")]
    pub timeout: Option<f64>,
    /// Run the ranks on these hosts, started over --rsh: `a,b:4,c` (`:SLOTS`, default 1); -n
    /// fills them in order.
    #[arg(long, value_name = "HOST[:SLOTS],...", conflicts_with_all = ["hostfile", "net"])]
    pub hosts: Option<String>,
    /// Like --hosts, from a file: one host a line, `host`, `host slots=N` (Open MPI) or `host:N`
    /// (Hydra); `#` comments.
    #[arg(long, value_name = "FILE", conflicts_with = "net")]
    pub hostfile: Option<PathBuf>,
    /// With --hosts/--hostfile: if -n is more than the slots, go round the hosts again instead
    /// of failing.
    #[arg(long)]
    pub oversubscribe: bool,
    /// Command that runs a command on a host, invoked as `CMD HOST REMOTE_COMMAND` (split at
    /// spaces); e.g. bench/netns-rsh for the testbed.
    #[arg(long, value_name = "CMD", env = "HX_RSH", default_value = DEFAULT_RSH)]
    pub rsh: String,
    /// hxcomm on the remote hosts (default: this executable's path).
    #[arg(long, value_name = "PATH")]
    pub remote_hxcomm: Option<String>,
    /// Address of this host on which the bootstrap service listens for the remote ranks
    /// (default: this host's address on the route to the first remote host).
    #[arg(long, value_name = "IP")]
    pub bootstrap_addr: Option<IpAddr>,
    /// Program and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    pub program: Vec<String>,
}

impl RunArgs {
    /// `hxcomm run -n ranks -- program...` with every option at its default.
    pub fn new<S: Into<String>>(ranks: u32, program: impl IntoIterator<Item = S>) -> Self {
        RunArgs {
            ranks,
            net: false,
            name: "hx".into(),
            ranks_per_host: None,
            net_hosts: None,
            policy: None,
            tag_output: false,
            env: Vec::new(),
            timeout: None,
            hosts: None,
            hostfile: None,
            oversubscribe: false,
            rsh: DEFAULT_RSH.into(),
            remote_hxcomm: None,
            bootstrap_addr: None,
            program: program.into_iter().map(Into::into).collect(),
        }
    }
}

/// Where the ranks' output goes when the launcher forwards it.
pub struct OutputSinks {
    pub stdout: Sink,
    pub stderr: Sink,
}

/// Runs a job; returns the process exit code.
pub fn run(args: RunArgs) -> i32 {
    run_with_output(args, None)
}

/// Runs a job. With `sinks`, the ranks' stdout and stderr are always read through pipes and
/// written there (prefixed under `--tag-output`); without, they go to this process's stdout and
/// stderr (inherited, or through pipes under `--tag-output`).
pub fn run_with_output(args: RunArgs, sinks: Option<OutputSinks>) -> i32 {
    if let Err(e) = bind::check_env() {
        eprintln!("hxcomm run: {e}");
        return 2;
    }
    let plan = match plan::plan(&args) {
        Ok(p) => p,
        Err(e) => {
            if e.msg.starts_with("hxcomm run") {
                eprintln!("{}", e.msg);
            } else {
                eprintln!("hxcomm run: {}", e.msg);
            }
            return e.code;
        }
    };
    let output = match sinks {
        Some(s) => Some(job::Output {
            stdout: s.stdout,
            stderr: s.stderr,
            tag: args.tag_output,
            framed: false,
        }),
        None if args.tag_output => Some(job::Output {
            stdout: Arc::new(Mutex::new(std::io::stdout())) as Arc<Mutex<dyn Write + Send>>,
            stderr: Arc::new(Mutex::new(std::io::stderr())),
            tag: true,
            framed: false,
        }),
        None => None,
    };

    let secret = hx_bootstrap::new_secret();
    let server =
        match hx_bootstrap::KvServer::start(SocketAddr::new(plan.bind, 0), args.ranks, secret) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("hxcomm run: cannot start the bootstrap service: {e}");
                return 1;
            }
        };
    let env = job::JobEnv {
        bootstrap: server.local_addr().to_string(),
        secret_hex: hx_bootstrap::secret_to_hex(&secret),
    };
    tracing::debug!(bootstrap = %env.bootstrap, ranks = args.ranks, program = ?plan.program, "starting job");
    // A rank stopped (SIGSTOP, a debugger) this long hangs the job: stop it, naming the rank.
    let hang_after = plan
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "HX_RANK_TIMEOUT")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("HX_RANK_TIMEOUT").ok())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map_or(
            std::time::Duration::from_secs(30),
            std::time::Duration::from_secs_f64,
        );

    let signals = signals::SignalGuard::install();
    if let Some(remote) = &plan.remote {
        // Output always comes back through the agents' connections.
        let (out, err) = match output {
            Some(o) => (o.stdout, o.stderr),
            None => (
                Arc::new(Mutex::new(std::io::stdout())) as Sink,
                Arc::new(Mutex::new(std::io::stderr())) as Sink,
            ),
        };
        let code = remote::run(
            &plan,
            remote,
            args.ranks,
            &env,
            out,
            err,
            args.tag_output,
            hang_after,
            &signals,
        );
        server.shutdown();
        return code;
    }
    let mut job = job::Job::new(args.ranks);
    for r in 0..args.ranks {
        if let Some(sig) = signals.pending() {
            eprintln!(
                "hxcomm run: received {} while starting ranks",
                signals::signal_name(sig)
            );
            job.kill_now();
            server.shutdown();
            return 128 + sig;
        }
        if let Err(e) = job.spawn(&plan, r, &env, output.as_ref()) {
            eprintln!(
                "hxcomm run: cannot start rank {r} ({}): {e}",
                plan.program.display()
            );
            job.kill_now();
            server.shutdown();
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    }
    let code = job.wait(&signals, plan.timeout, hang_after);
    server.shutdown();
    code
}
