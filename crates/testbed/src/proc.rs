//! Child processes for the programs that drive a testbed (`hxcomm demo`, `hxcomm bench compare`):
//! each command in its own process group, run with a timeout, stopped as a group (SIGTERM, then
//! SIGKILL after a grace time) on timeout, on error (background servers on drop) and on Ctrl-C.
//!
//! Why here: both programs run their tools this way and both already stand on the testbed (whose
//! namespaces [`in_ns`] and [`wait_listening`] name), so one copy serves them. Signals are
//! signal-hook's: [`catch_signals`] records the signal instead of ending the process, every wait
//! below checks it, stops its children and returns an error, so the caller's testbed guard still
//! runs.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The last caught signal (0: none).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// How long a stopped group gets between SIGTERM and SIGKILL unless [`Job::grace`] says otherwise.
const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// From now on `signals` (e.g. SIGINT, SIGTERM) are recorded for [`interrupted`] instead of
/// ending the process. Call once per process.
pub fn catch_signals(signals: &[i32]) {
    for &sig in signals {
        // Fails only for the signals signal-hook forbids (SIGKILL, SIGSEGV, ..).
        let _ = signal_hook::flag::register_usize(sig, &PENDING, sig as usize);
    }
}

/// The signal caught since [`catch_signals`], if any.
pub fn interrupted() -> Option<i32> {
    match PENDING.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s as i32),
    }
}

/// `Err("interrupted by SIGINT")` once a caught signal has come.
pub fn check_interrupted() -> Result<(), String> {
    interrupted().map_or(Ok(()), |sig| Err(interruption(sig)))
}

fn interruption(sig: i32) -> String {
    let name = signal_hook::low_level::signal_name(sig).unwrap_or("a signal");
    format!("interrupted by {name}")
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn kill_group(child: &Child, sig: Signal) {
    // The group of our own child (its id is the group id).
    let _ = kill(Pid::from_raw(-(child.id() as libc::pid_t)), sig);
}

/// Stops a process group: SIGTERM, then SIGKILL after `grace`; reaps the leader.
fn stop_group(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        // The leader is gone; members may still live.
        kill_group(child, Signal::SIGKILL);
        return;
    }
    kill_group(child, Signal::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group(child, Signal::SIGKILL);
    let _ = child.wait();
}

/// A running command whose output is being collected.
pub struct Job {
    what: String,
    child: Option<Child>,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
    grace: Duration,
}

/// What a finished command left.
pub struct Done {
    pub ok: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

/// The last four non-empty lines of `err` then `out`, joined with " | ".
fn tail(err: &str, out: &str) -> String {
    let lines: Vec<&str> = err
        .lines()
        .chain(out.lines())
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(4)..].join(" | ")
}

impl Done {
    /// Stdout on success, else an error with the command's status and the end of its stderr.
    pub fn into_stdout(self, what: &str) -> Result<String, String> {
        if self.ok {
            return Ok(self.stdout);
        }
        Err(format!(
            "{what}: {}: {}",
            self.status,
            tail(&self.stderr, &self.stdout)
        ))
    }
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

/// What a reader thread collected if it ends by `until` (a process that left the group could
/// hold the pipe open for ever), else "".
fn collected(h: Option<JoinHandle<String>>, until: Instant) -> String {
    let Some(h) = h else {
        return String::new();
    };
    while !h.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    if h.is_finished() {
        h.join().unwrap_or_default()
    } else {
        String::new()
    }
}

impl Job {
    /// Starts `cmd` in a process group of its own, stdin from /dev/null, stdout and stderr
    /// collected.
    pub fn spawn(mut cmd: Command) -> Result<Job, String> {
        check_interrupted()?;
        let what = describe(&cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let out = child.stdout.take().map(reader);
        let err = child.stderr.take().map(reader);
        Ok(Job {
            what,
            child: Some(child),
            out,
            err,
            grace: DEFAULT_GRACE,
        })
    }

    /// Time between SIGTERM and SIGKILL when the job is stopped (default 3 s).
    pub fn grace(mut self, grace: Duration) -> Job {
        self.grace = grace;
        self
    }

    /// Waits up to `timeout`; on timeout or a caught signal, stops the group and returns an
    /// error (a timeout's names the command and ends with the last lines it wrote).
    pub fn wait(mut self, timeout: Duration) -> Result<Done, String> {
        let mut child = self.child.take().expect("job waited once");
        let t0 = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => return Err(format!("{}: {e}", self.what)),
            }
            if let Some(sig) = interrupted() {
                stop_group(&mut child, self.grace);
                return Err(interruption(sig));
            }
            if t0.elapsed() > timeout {
                stop_group(&mut child, self.grace);
                let until = Instant::now() + Duration::from_secs(1);
                let err = collected(self.err.take(), until);
                let out = collected(self.out.take(), until);
                let last = tail(&err, &out);
                return Err(format!(
                    "{}: no result after {} s (stopped){}{last}",
                    self.what,
                    timeout.as_secs(),
                    if last.is_empty() { "" } else { ": " },
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Whatever the leader left running in its group (e.g. a daemon) goes too.
        kill_group(&child, Signal::SIGKILL);
        let stdout = self.out.take().map(|h| h.join().unwrap_or_default());
        let stderr = self.err.take().map(|h| h.join().unwrap_or_default());
        Ok(Done {
            ok: status.success(),
            status: status.to_string(),
            stdout: stdout.unwrap_or_default(),
            stderr: stderr.unwrap_or_default(),
        })
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_group(&mut c, self.grace);
        }
    }
}

/// Runs a command to completion with a timeout.
pub fn run(cmd: Command, timeout: Duration) -> Result<Done, String> {
    Job::spawn(cmd)?.wait(timeout)
}

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Makes the process `cmd` starts run on `cpu` only (set between fork and exec; a refusal
/// leaves it unbound).
pub fn bind_to_cpu(cmd: &mut Command, cpu: usize) {
    // SAFETY: the closure only makes a syscall on a set built on its stack (async-signal-safe).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

/// Makes the calling thread run on `cpu` only.
pub fn bind_current_thread(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("CPU {cpu} out of range"),
        ));
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; pid 0 is the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `ip netns exec NS PROG ARGS...`
pub fn in_ns(ns: &str, prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, prog]).args(args);
    c
}

/// Waits until namespace `ns` has a TCP listener on `addr:port`.
pub fn wait_listening(ns: &str, addr: &str, port: u16, timeout: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    let want = format!("{addr}:{port}");
    loop {
        check_interrupted()?;
        let out = run(in_ns(ns, "ss", &["-Hltn"]), Duration::from_secs(5))?;
        if out.stdout.split_whitespace().any(|w| w == want) {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(format!(
                "nothing listens on {want} in {ns} after {timeout:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `prog` is on PATH.
pub fn have(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn alive(pid: i32) -> bool {
        // Not reaped by us (a grandchild): gone once /proc has no entry, or a zombie.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    #[test]
    fn a_thread_binds_itself_to_one_cpu_and_a_cpu_out_of_range_is_refused() {
        let cpu = *allowed_cpus().last().unwrap();
        let got = std::thread::spawn(move || {
            bind_current_thread(cpu).unwrap();
            allowed_cpus()
        })
        .join()
        .unwrap();
        assert_eq!(got, vec![cpu]);
        assert!(allowed_cpus().contains(&cpu), "the calling thread only");
        assert!(bind_current_thread(libc::CPU_SETSIZE as usize).is_err());
    }

    /// One test, in order: the flag that a caught signal sets is process-wide.
    #[test]
    fn jobs_finish_time_out_as_a_group_and_stop_on_a_signal() {
        let d = run(
            sh("echo out; echo oops >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(!d.ok);
        assert_eq!(d.stdout, "out\n");
        let e = d.into_stdout("sh").unwrap_err();
        assert!(e.contains("exit status: 3") && e.contains("oops"), "{e}");
        assert_eq!(
            run(sh("echo fine"), Duration::from_secs(10))
                .unwrap()
                .into_stdout("sh")
                .unwrap(),
            "fine\n"
        );

        // A timeout stops the whole group (the background sleep too) and says what it printed.
        let t0 = Instant::now();
        let e = run(sh("sleep 30 & echo $! >&2; wait"), Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
        assert!(e.starts_with("sh -c "), "{e}");
        assert!(e.contains("no result after 1 s (stopped): "), "{e}");
        let pid: i32 = e.rsplit(": ").next().unwrap().trim().parse().unwrap();
        let t1 = Instant::now();
        while alive(pid) && t1.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(pid), "background pid {pid} outlived its group");

        // A caught signal stops a running job and every later one.
        assert_eq!(interrupted(), None);
        catch_signals(&[libc::SIGUSR1]);
        let job = Job::spawn(sh("sleep 30")).unwrap();
        let raiser = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            signal_hook::low_level::raise(libc::SIGUSR1).unwrap();
        });
        let t0 = Instant::now();
        let e = job.wait(Duration::from_secs(20)).err().unwrap();
        raiser.join().unwrap();
        assert_eq!(e, "interrupted by SIGUSR1");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(interrupted(), Some(libc::SIGUSR1));
        assert_eq!(
            Job::spawn(sh("true")).err().unwrap(),
            "interrupted by SIGUSR1"
        );
    }
}
