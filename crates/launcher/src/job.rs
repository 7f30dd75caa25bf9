//! Starting, watching and stopping the ranks.
//!
//! Why it is built this way — no orphans, ever:
//! - every rank is the leader of its own process group, so one `kill(-pgid)` reaches everything
//!   it started (a shell's children included), and terminal Ctrl-C reaches only the launcher,
//!   which then stops the ranks in order;
//! - every rank gets `PR_SET_PDEATHSIG(SIGKILL)`, so even a `kill -9` of the launcher takes the
//!   ranks with it (the death signal follows the *thread* that forked, so ranks are started and
//!   watched from the thread that calls `run`);
//! - exits are noticed with `waitid(WNOWAIT)` every few milliseconds: the rank stays a zombie
//!   while its group is killed, so its pid (= the group id) cannot be reused by an unrelated
//!   process before we signal the group; only then is it reaped;
//! - a [`Watchdog`] process kills the groups if the launcher itself is killed with SIGKILL, which
//!   the parent-death signal alone would not cover for the ranks' own children; each rank
//!   registers its group there itself, between fork and exec, so none runs unknown to it.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{getpid, getppid, Pid};

use crate::output::{self, Sink};
use crate::plan::{Placement, Plan};
use crate::signals::{signal_name, SignalGuard};
use crate::watchdog::Watchdog;

/// How often the monitor loop looks at the ranks.
const POLL: Duration = Duration::from_millis(10);
/// Time between SIGTERM and SIGKILL when stopping the job.
pub const GRACE: Duration = Duration::from_secs(2);
/// Exit code when a rank hangs (stopped for HX_RANK_TIMEOUT).
pub const HANG_EXIT: i32 = 125;

/// The state letter of a process (R, S, D, T, t, Z, ...), from /proc.
fn process_state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
/// Exit code when `--timeout` expires (as `timeout(1)`).
pub const TIMEOUT_EXIT: i32 = 124;

/// How a rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

impl Ended {
    pub fn code(self) -> i32 {
        match self {
            Ended::Exited(c) => c,
            Ended::Signaled(s) => 128 + s,
        }
    }
    pub fn failed(self) -> bool {
        self != Ended::Exited(0)
    }
}

pub(crate) struct Rank {
    pub(crate) rank: u32,
    pub(crate) pid: libc::pid_t,
    /// Kept so the pipes' other ends live as long as needed; never waited on through std.
    _child: Child,
    pub(crate) ended: Option<Ended>,
}

/// What to start for a rank: program, arguments, extra environment.
pub(crate) struct Spawn<'a> {
    pub program: &'a std::path::Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
}

/// The environment every rank gets from the launcher, beside its own.
pub struct JobEnv {
    pub bootstrap: String,
    pub secret_hex: String,
}

pub struct Output {
    pub stdout: Sink,
    pub stderr: Sink,
    pub tag: bool,
    /// In the remote agent: prefix lines with `o RANK ` / `e RANK ` (the agent's framing towards
    /// the launcher) instead of `[RANK] `.
    pub framed: bool,
}

pub struct Job {
    pub(crate) ranks: Vec<Rank>,
    size: u32,
    out_done: mpsc::Receiver<()>,
    out_done_tx: Option<mpsc::Sender<()>>,
    out_threads: usize,
    pub(crate) watchdog: Option<Watchdog>,
    /// The CPU of each rank this process starts, in the order it starts them (empty: not
    /// bound; crate::bind).
    cpus: Vec<usize>,
}

impl Job {
    pub fn new(size: u32) -> Self {
        Self::new_sized(size, size)
    }

    /// A job of `size` ranks of which `here` are started by this process.
    pub fn new_sized(here: u32, size: u32) -> Self {
        let (tx, rx) = mpsc::channel();
        Job {
            ranks: Vec::with_capacity(here as usize),
            size,
            out_done: rx,
            out_done_tx: Some(tx),
            out_threads: 0,
            cpus: crate::bind::from_env(here as usize),
            watchdog: match Watchdog::start(here as usize) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the launcher watchdog; a SIGKILL of the launcher could leave rank subprocesses behind");
                    None
                }
            },
        }
    }

    /// Starts rank `r`. On error nothing was started for it.
    pub fn spawn(
        &mut self,
        plan: &Plan,
        r: u32,
        env: &JobEnv,
        output: Option<&Output>,
    ) -> io::Result<()> {
        let spec = Spawn {
            program: &plan.program,
            args: &plan.args,
            env: &plan.env,
        };
        self.spawn_at(&spec, r, &plan.placements[r as usize], env, output)
    }

    /// Starts rank `r` of `spec` at placement `pl`. On error nothing was started for it.
    pub(crate) fn spawn_at(
        &mut self,
        spec: &Spawn,
        r: u32,
        pl: &Placement,
        env: &JobEnv,
        output: Option<&Output>,
    ) -> io::Result<()> {
        let mut cmd = match &pl.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(spec.program);
                c
            }
            None => Command::new(spec.program),
        };
        cmd.args(spec.args);
        for (k, v) in spec.env {
            cmd.env(k, v);
        }
        cmd.env("HX_RANK", r.to_string())
            .env("HX_SIZE", self.size.to_string())
            .env("HX_LOCAL_RANK", pl.local_rank.to_string())
            .env("HX_LOCAL_SIZE", pl.local_size.to_string())
            .env("HX_BOOTSTRAP", &env.bootstrap)
            .env("HX_JOB_SECRET", &env.secret_hex);
        // Ranks run in their own process groups, where reading a terminal would stop them.
        cmd.stdin(Stdio::null());
        if output.is_some() {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        cmd.process_group(0);
        if let Some(&cpu) = self.cpus.get(self.ranks.len()) {
            hx_testbed::proc::bind_to_cpu(&mut cmd, cpu);
        }
        die_with_launcher(&mut cmd);
        // The rank registers its group itself before its program runs: a `kill -9` of this
        // process right after the spawn must not leave what the rank starts unknown to the
        // watchdog.
        if let Some(w) = &self.watchdog {
            w.register_child(&mut cmd);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some(w) = &self.watchdog {
                    w.spawn_failed();
                }
                return Err(e);
            }
        };
        let pid = child.id() as libc::pid_t;
        if let Some(w) = &self.watchdog {
            w.add(pid);
        }
        if let Some(o) = output {
            let (out_prefix, err_prefix) = if o.framed {
                (Some(format!("o {r} ")), Some(format!("e {r} ")))
            } else {
                let p = o.tag.then(|| format!("[{r}] "));
                (p.clone(), p)
            };
            let done = self.out_done_tx.clone().expect("output channel open");
            if let Some(p) = child.stdout.take() {
                if output::forward(p, out_prefix, o.stdout.clone(), done.clone()).is_ok() {
                    self.out_threads += 1;
                }
            }
            if let Some(p) = child.stderr.take() {
                if output::forward(p, err_prefix, o.stderr.clone(), done).is_ok() {
                    self.out_threads += 1;
                }
            }
        }
        self.ranks.push(Rank {
            rank: r,
            pid,
            _child: child,
            ended: None,
        });
        Ok(())
    }

    /// Signals the process group of every rank still running.
    pub(crate) fn signal_all(&self, sig: Signal) {
        for rk in self.ranks.iter().filter(|r| r.ended.is_none()) {
            // The rank is not reaped yet, so its pgid is still ours.
            let _ = kill(Pid::from_raw(-rk.pid), sig);
        }
    }

    /// Has rank `i` ended? Leaves it a zombie (WNOWAIT) so its group id stays reserved.
    pub(crate) fn peek(pid: libc::pid_t) -> Option<Ended> {
        // SAFETY: zeroed siginfo is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r == -1 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ECHILD) {
                // Already reaped by someone else: treat as a failure we cannot describe.
                return Some(Ended::Exited(255));
            }
            return None;
        }
        // SAFETY: waitid filled `info`; si_pid is 0 when nothing changed state (WNOHANG).
        unsafe {
            if info.si_pid() == 0 {
                return None;
            }
            let status = info.si_status();
            match info.si_code {
                libc::CLD_EXITED => Some(Ended::Exited(status)),
                libc::CLD_KILLED | libc::CLD_DUMPED => Some(Ended::Signaled(status)),
                _ => None,
            }
        }
    }

    /// Kills what is left of the rank's group, then reaps the rank.
    pub(crate) fn finish(watchdog: &Option<Watchdog>, pid: libc::pid_t) {
        // The rank is not reaped yet, so `-pid` is still its process group.
        let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
        if let Some(w) = watchdog {
            w.remove(pid);
        }
        // Reaps our own child.
        let _ = waitpid(Pid::from_raw(pid), None);
    }

    /// Watches the ranks until all have ended; stops the job on the first failure, on SIGINT /
    /// SIGTERM to the launcher, or when `timeout` passes. Returns the job's exit code.
    ///
    /// A rank that stays stopped (state T: SIGSTOP, or held by a debugger) for `hang_after`
    /// cannot make progress and would hang its peers: the job is stopped, naming it.
    pub fn wait(
        mut self,
        signals: &SignalGuard,
        timeout: Option<Duration>,
        hang_after: Duration,
    ) -> i32 {
        let start = Instant::now();
        let mut stopped_since: Vec<Option<Instant>> = vec![None; self.ranks.len()];
        let mut next_hang_check = Instant::now();
        let mut result: Option<i32> = None;
        // Set once the job is being stopped: when to escalate to SIGKILL.
        let mut kill_at: Option<Instant> = None;
        let mut killed = false;
        loop {
            let mut running = 0;
            for i in 0..self.ranks.len() {
                if self.ranks[i].ended.is_some() {
                    continue;
                }
                let pid = self.ranks[i].pid;
                let Some(end) = Self::peek(pid) else {
                    running += 1;
                    continue;
                };
                Self::finish(&self.watchdog, pid);
                let rank = self.ranks[i].rank;
                self.ranks[i].ended = Some(end);
                if kill_at.is_none() && end.failed() {
                    match end {
                        Ended::Exited(c) => {
                            eprintln!("hxcomm run: rank {rank} exited with status {c}")
                        }
                        Ended::Signaled(s) => eprintln!(
                            "hxcomm run: rank {rank} was killed by signal {}",
                            signal_name(s)
                        ),
                    }
                    result = Some(end.code());
                    kill_at = Some(self.stop());
                } else {
                    tracing::debug!(rank, ?end, "rank ended");
                }
            }
            if running == 0 {
                break;
            }
            if kill_at.is_none() {
                if let Some(sig) = signals.pending() {
                    eprintln!(
                        "hxcomm run: received {}, stopping {running} rank(s)",
                        signal_name(sig)
                    );
                    result = Some(128 + sig);
                    kill_at = Some(self.stop());
                } else if let Some((rank, secs)) =
                    self.hung_rank(&mut stopped_since, &mut next_hang_check, hang_after)
                {
                    eprintln!(
                        "hxcomm run: rank {rank} has been stopped for {secs:.0} s (HX_RANK_TIMEOUT); it hangs the job, stopping {running} rank(s)"
                    );
                    result = Some(HANG_EXIT);
                    self.signal_all(Signal::SIGCONT);
                    kill_at = Some(self.stop());
                } else if timeout.is_some_and(|t| start.elapsed() >= t) {
                    eprintln!(
                        "hxcomm run: job timed out after {:.1} s, stopping {running} rank(s)",
                        timeout.unwrap_or_default().as_secs_f64()
                    );
                    result = Some(TIMEOUT_EXIT);
                    kill_at = Some(self.stop());
                }
            }
            if let Some(t) = kill_at {
                if !killed && Instant::now() >= t {
                    tracing::debug!("ranks still running after SIGTERM: sending SIGKILL");
                    self.signal_all(Signal::SIGKILL);
                    killed = true;
                }
            }
            std::thread::sleep(POLL);
        }
        self.drain_output();
        result.unwrap_or(0)
    }

    /// Every tenth of a second: is some running rank stopped, and for how long?
    pub(crate) fn hung_rank(
        &self,
        stopped_since: &mut [Option<Instant>],
        next_check: &mut Instant,
        hang_after: Duration,
    ) -> Option<(u32, f64)> {
        let now = Instant::now();
        if now < *next_check {
            return None;
        }
        // Often enough that a stopped rank is named before its peers' own HX_RANK_TIMEOUT
        // (the same span, counted from when their rails went down, after the stop) fails
        // them: every half second lost that race on a loaded machine.
        *next_check = now + Duration::from_millis(100);
        for (i, rk) in self.ranks.iter().enumerate() {
            let stopped =
                rk.ended.is_none() && process_state(rk.pid).is_some_and(|c| c == 'T' || c == 't');
            if !stopped {
                stopped_since[i] = None;
                continue;
            }
            let since = *stopped_since[i].get_or_insert(now);
            if now.duration_since(since) >= hang_after {
                return Some((rk.rank, now.duration_since(since).as_secs_f64()));
            }
        }
        None
    }

    /// Sends SIGTERM to every running rank; returns when to send SIGKILL.
    fn stop(&self) -> Instant {
        self.signal_all(Signal::SIGTERM);
        Instant::now() + GRACE
    }

    /// Kills and reaps every rank right away (used when starting the job failed half-way).
    pub fn kill_now(mut self) {
        self.signal_all(Signal::SIGKILL);
        for rk in &mut self.ranks {
            if rk.ended.is_none() {
                Self::finish(&self.watchdog, rk.pid);
                rk.ended = Some(Ended::Signaled(libc::SIGKILL));
            }
        }
        self.drain_output();
    }

    /// Waits (briefly) for the output threads to forward what the ranks wrote last. A process
    /// that escaped its group could hold a pipe open forever, so this gives up after a while.
    pub(crate) fn drain_output(&mut self) {
        self.out_done_tx = None;
        let deadline = Instant::now() + GRACE;
        while self.out_threads > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out_done.recv_timeout(left) {
                Ok(()) => self.out_threads -= 1,
                Err(_) => break,
            }
        }
    }
}

impl Drop for Job {
    /// Whatever path leaves the launcher, no rank outlives it.
    fn drop(&mut self) {
        for rk in &mut self.ranks {
            if rk.ended.is_none() {
                Self::finish(&self.watchdog, rk.pid);
                rk.ended = Some(Ended::Signaled(libc::SIGKILL));
            }
        }
    }
}

/// Makes the child `cmd` starts die (SIGKILL) when the launcher dies, also if the launcher
/// dies between fork and the prctl: no rank or rsh process outlives `hxcomm run`.
pub(crate) fn die_with_launcher(cmd: &mut Command) {
    let parent = getpid();
    // SAFETY: in the child only async-signal-safe calls (prctl, getppid, _exit) run between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            set_pdeathsig(Signal::SIGKILL)?;
            // The launcher died before prctl took effect: do not run as an orphan.
            if getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}
