//! Child processes for `compare`: each in its own process group, run with a timeout, killed as a
//! group on timeout, on error (background servers on drop) and on Ctrl-C.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM set a flag that the waits below check: they stop their children and
/// return an error, so the testbed guard still runs.
pub fn catch_signals() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

pub fn check_interrupted() -> Result<(), String> {
    if interrupted() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Stops a process group: SIGTERM, then SIGKILL after a grace period; reaps the leader.
fn stop_group(child: &mut Child) {
    let pg = child.id() as libc::pid_t;
    if let Ok(Some(_)) = child.try_wait() {
        // The leader is gone; members may still live.
        // SAFETY: plain kill(2) on our own group id.
        unsafe { libc::kill(-pg, libc::SIGKILL) };
        return;
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pg, libc::SIGTERM) };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pg, libc::SIGKILL) };
    let _ = child.wait();
}

/// A running command whose output is being collected.
pub struct Job {
    what: String,
    child: Option<Child>,
    out: Option<std::thread::JoinHandle<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

/// What a finished command left.
pub struct Done {
    pub ok: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl Done {
    /// Stdout on success, else an error with the command's status and the end of its stderr.
    pub fn into_stdout(self, what: &str) -> Result<String, String> {
        if self.ok {
            return Ok(self.stdout);
        }
        let tail: Vec<&str> = self
            .stderr
            .lines()
            .chain(self.stdout.lines())
            .filter(|l| !l.trim().is_empty())
            .collect();
        let tail = tail[tail.len().saturating_sub(4)..].join(" | ");
        Err(format!("{what}: {}: {tail}", self.status))
    }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

impl Job {
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
        })
    }

    /// Waits up to `timeout` (then stops the group and reports a timeout).
    pub fn wait(mut self, timeout: Duration) -> Result<Done, String> {
        let mut child = self.child.take().expect("job waited once");
        let t0 = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => return Err(format!("{}: {e}", self.what)),
            }
            if interrupted() {
                stop_group(&mut child);
                return Err("interrupted".into());
            }
            if t0.elapsed() > timeout {
                stop_group(&mut child);
                return Err(format!(
                    "{}: no result after {} s (stopped)",
                    self.what,
                    timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Whatever the leader left running in its group (e.g. a daemon) goes too.
        // SAFETY: kill(2) on our own child's group id.
        unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
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
            stop_group(&mut c);
        }
    }
}

/// Runs a command to completion with a timeout.
pub fn run(cmd: Command, timeout: Duration) -> Result<Done, String> {
    Job::spawn(cmd)?.wait(timeout)
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
