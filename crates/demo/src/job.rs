//! Runs one `hxcomm run` job and collects its output; on a pending signal it asks the launcher
//! to stop the job (SIGTERM: the launcher stops its ranks and exits).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::signals;

/// Runs `exe args..`; returns stdout when the job exits 0.
pub fn run(exe: &str, args: &[String], deadline: Duration) -> Result<String, String> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {exe}: {e}"))?;
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let mut stopping: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the job: {e}")),
        }
        let late = start.elapsed() > deadline;
        if stopping.is_none() && (signals::pending().is_some() || late) {
            // SAFETY: kill on our own child's pid, which has not been reaped yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            stopping = Some(Instant::now());
        }
        if stopping.is_some_and(|t| t.elapsed() > Duration::from_secs(10)) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if let Some(sig) = signals::pending() {
        return Err(format!("interrupted by {}", signals::name(sig)));
    }
    if !status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "`hxcomm {}` failed ({status}){}:\n{}",
            args.join(" "),
            if start.elapsed() > deadline {
                " after the deadline"
            } else {
                ""
            },
            tail.join("\n")
        ));
    }
    Ok(stdout)
}
