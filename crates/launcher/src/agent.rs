//! `hxcomm run-agent`: the per-host end of a job started with `--hosts`/`--hostfile`.
//!
//! The launcher starts one agent per host through the rsh command (`ssh HOST 'exec hxcomm
//! run-agent'`) and talks to it over the rsh's stdin and stdout only:
//!
//! - launcher -> agent (stdin): a header of lines `KEY VALUE...` (strings hex-encoded, so any byte
//!   may appear in them), ending with `start`: the host's name, the job size, the bootstrap
//!   address, the job secret, the working directory, program, arguments, extra environment and
//!   the ranks to start here. Then `stop` (SIGTERM every rank; the launcher sends `kill` after its
//!   grace time) or `kill`. End-of-file means the launcher is gone or done: every rank still
//!   running is killed at once and the agent exits.
//! - agent -> launcher (stdout): `hxcomm-agent 1 PID` first, then `o RANK LINE` / `e RANK LINE`
//!   (the ranks' stdout/stderr, a line at a time), `started`, `end RANK exit CODE` / `end RANK
//!   signal SIG`, `fail RANK CODE MSG` (a rank could not start; the agent kills the others and
//!   exits) and `hang RANK SECS`. The agent's own diagnostics go to stderr.
//!
//! Why so: the secret travels inside the ssh session, never on a command line (`ps` shows
//! command lines to every user of a host); and the connection is the lifeline. When the launcher
//! dies, even by `kill -9`, its rsh process dies with it (parent-death signal, watchdog), sshd
//! closes the session, the agent reads end-of-file and kills its ranks. Ranks are supervised
//! exactly as `hxcomm run` supervises local ranks (own process groups, parent-death signal to the
//! agent, a watchdog for their children), so the agent's own `kill -9` leaves nothing either.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::job::{self, Ended, Job, JobEnv, Spawn};
use crate::output::Sink;
use crate::plan::{self, Placement};
use crate::signals::SignalGuard;

/// Version of the launcher-agent protocol; both ends must agree.
pub const PROTOCOL: u32 = 1;

/// Hex encoding of a string, for the header.
pub fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Decodes [`hex`].
pub fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// What the launcher tells an agent.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Header {
    pub host: String,
    pub size: u32,
    pub bootstrap: String,
    pub secret_hex: String,
    pub cwd: Option<String>,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// (rank, local rank, local size)
    pub ranks: Vec<(u32, u32, u32)>,
    /// HX_RANK_TIMEOUT in seconds.
    pub hang_after: f64,
}

impl Header {
    /// The header as sent over the agent's stdin, `start` line included.
    pub fn encode(&self) -> String {
        let mut s = format!("hxcomm-job {PROTOCOL}\n");
        s += &format!("host {}\n", hex(&self.host));
        s += &format!("size {}\n", self.size);
        s += &format!("bootstrap {}\n", hex(&self.bootstrap));
        s += &format!("secret {}\n", hex(&self.secret_hex));
        if let Some(c) = &self.cwd {
            s += &format!("cwd {}\n", hex(c));
        }
        s += &format!("program {}\n", hex(&self.program));
        for a in &self.args {
            s += &format!("arg {}\n", hex(a));
        }
        for (k, v) in &self.env {
            s += &format!("env {} {}\n", hex(k), hex(v));
        }
        for (r, lr, ls) in &self.ranks {
            s += &format!("rank {r} {lr} {ls}\n");
        }
        s += &format!("hang {}\n", self.hang_after);
        s += "start\n";
        s
    }

    /// Reads a header up to its `start` line.
    pub fn read(r: &mut impl BufRead) -> Result<Header, String> {
        let mut h = Header::default();
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) => return Err("the launcher closed the connection before `start`".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("cannot read the job from stdin: {e}")),
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("bad line from the launcher: {:?}", line.trim_end());
            // An empty string is an empty field (split_whitespace drops it).
            let s = |i: usize| {
                w.get(i)
                    .map_or(Some(String::new()), |x| unhex(x))
                    .ok_or_else(bad)
            };
            let n = |i: usize| w.get(i).and_then(|x| x.parse::<u32>().ok()).ok_or_else(bad);
            if first {
                if w.first() != Some(&"hxcomm-job") {
                    return Err(bad());
                }
                if w.get(1) != Some(&PROTOCOL.to_string().as_str()) {
                    return Err(format!(
                        "the launcher speaks protocol {:?}, this agent {PROTOCOL}: use the same hxcomm version on every host",
                        w.get(1).unwrap_or(&"")
                    ));
                }
                first = false;
                continue;
            }
            match w.first().copied() {
                Some("host") => h.host = s(1)?,
                Some("size") => h.size = n(1)?,
                Some("bootstrap") => h.bootstrap = s(1)?,
                Some("secret") => h.secret_hex = s(1)?,
                Some("cwd") => h.cwd = Some(s(1)?),
                Some("program") => h.program = s(1)?,
                Some("arg") => h.args.push(s(1)?),
                Some("env") => h.env.push((s(1)?, s(2)?)),
                Some("rank") => h.ranks.push((n(1)?, n(2)?, n(3)?)),
                Some("hang") => {
                    h.hang_after = w.get(1).and_then(|x| x.parse().ok()).ok_or_else(bad)?
                }
                Some("start") => return Ok(h),
                _ => return Err(bad()),
            }
        }
    }
}

/// Messages from the launcher after `start`.
enum Ctl {
    Stop,
    Kill,
    Eof,
}

/// Writes one protocol line to the launcher (under the lock the output threads share).
fn say(out: &Sink, line: &str) {
    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
    let _ = o.write_all(line.as_bytes());
    let _ = o.write_all(b"\n");
    let _ = o.flush();
}

/// Runs the agent on this host: reads the job from stdin, starts its ranks, reports, exits.
pub fn run_agent() -> i32 {
    let out: Sink = Arc::new(Mutex::new(std::io::stdout()));
    say(
        &out,
        &format!("hxcomm-agent {PROTOCOL} {}", std::process::id()),
    );
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    let h = match Header::read(&mut stdin) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("hxcomm run-agent: {e}");
            return 2;
        }
    };
    let signals = SignalGuard::install();
    // Commands from the launcher, and its end-of-file.
    let (tx, rx) = mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("hx-agent-stdin".into())
        .spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Ctl::Eof);
                        return;
                    }
                    Ok(_) => match line.trim() {
                        "stop" => {
                            let _ = tx.send(Ctl::Stop);
                        }
                        "kill" => {
                            let _ = tx.send(Ctl::Kill);
                        }
                        _ => {}
                    },
                }
            }
        });

    if let Some(dir) = &h.cwd {
        // The launcher's directory, if this host has it (a shared file system); else the login
        // directory.
        let _ = std::env::set_current_dir(dir);
    }
    let program = match plan::resolve_program(&h.program, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(e) => {
            let r = h.ranks.first().map_or(0, |x| x.0);
            let msg = format!("cannot start rank {r} on host {}: {}", h.host, e.msg);
            say(&out, &format!("fail {r} {} {}", e.code, hex(&msg)));
            return e.code;
        }
    };
    let env = JobEnv {
        bootstrap: h.bootstrap.clone(),
        secret_hex: h.secret_hex.clone(),
    };
    let spec = Spawn {
        program: &program,
        args: &h.args,
        env: &h.env,
    };
    let output = job::Output {
        stdout: out.clone(),
        stderr: out.clone(),
        tag: false,
        framed: true,
    };
    let mut job = Job::new_sized(h.ranks.len() as u32, h.size);
    for &(r, lr, ls) in &h.ranks {
        let pl = Placement {
            host: 0,
            netns: None,
            local_rank: lr,
            local_size: ls,
        };
        if let Err(e) = job.spawn_at(&spec, r, &pl, &env, Some(&output)) {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let msg = format!(
                "cannot start rank {r} ({}) on host {}: {e}",
                program.display(),
                h.host
            );
            say(&out, &format!("fail {r} {code} {}", hex(&msg)));
            job.kill_now();
            return code;
        }
    }
    say(&out, "started");
    supervise(job, &out, &rx, &signals, h.hang_after);
    0
}

/// The agent's monitor loop: reports every rank's end; stops or kills on the launcher's word;
/// kills everything on end-of-file or a signal to the agent.
fn supervise(
    mut job: Job,
    out: &Sink,
    rx: &mpsc::Receiver<Ctl>,
    signals: &SignalGuard,
    hang_after: f64,
) {
    let hang_after = if hang_after > 0.0 && hang_after.is_finite() {
        Duration::from_secs_f64(hang_after)
    } else {
        Duration::from_secs(30)
    };
    let mut stopped_since = vec![None; job.ranks.len()];
    let mut next_hang_check = Instant::now();
    let mut hang_reported = false;
    let mut kill_at: Option<Instant> = None;
    loop {
        let mut running = 0;
        for i in 0..job.ranks.len() {
            if job.ranks[i].ended.is_some() {
                continue;
            }
            let pid = job.ranks[i].pid;
            let Some(end) = Job::peek(pid) else {
                running += 1;
                continue;
            };
            Job::finish(&job.watchdog, pid);
            job.ranks[i].ended = Some(end);
            let r = job.ranks[i].rank;
            match end {
                Ended::Exited(c) => say(out, &format!("end {r} exit {c}")),
                Ended::Signaled(s) => say(out, &format!("end {r} signal {s}")),
            }
        }
        if running == 0 {
            break;
        }
        let mut kill = false;
        while let Ok(c) = rx.try_recv() {
            match c {
                Ctl::Stop if kill_at.is_none() => {
                    job.signal_all(Signal::SIGCONT);
                    job.signal_all(Signal::SIGTERM);
                    kill_at = Some(Instant::now() + job::GRACE);
                }
                Ctl::Stop => {}
                Ctl::Kill | Ctl::Eof => kill = true,
            }
        }
        if signals.pending().is_some() || kill_at.is_some_and(|t| Instant::now() >= t) {
            kill = true;
        }
        if kill {
            job.signal_all(Signal::SIGKILL);
        }
        if !hang_reported {
            if let Some((r, secs)) =
                job.hung_rank(&mut stopped_since, &mut next_hang_check, hang_after)
            {
                say(out, &format!("hang {r} {secs:.0}"));
                hang_reported = true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    job.drain_output();
}

/// The command line the rsh runs on the remote host (no secret in it).
pub fn remote_command(agent: &str) -> String {
    format!("exec {} run-agent", crate::hosts::shell_quote(agent))
}

/// Makes a program path given with a '/' absolute against `cwd`, without requiring it to exist
/// here (it must exist on the remote hosts); a bare name is left for the remote PATH.
pub fn remote_program(name: &str, cwd: Option<&Path>) -> String {
    if !name.contains('/') || name.starts_with('/') {
        return name.to_owned();
    }
    match cwd {
        Some(c) => {
            let mut p = PathBuf::from(c);
            for part in Path::new(name).components() {
                match part {
                    std::path::Component::CurDir => {}
                    other => p.push(other),
                }
            }
            p.to_string_lossy().into_owned()
        }
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            host: "node-1".into(),
            size: 6,
            bootstrap: "10.200.0.254:4000".into(),
            secret_hex: "ab".repeat(32),
            cwd: Some("/home/x y".into()),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "echo 'a\nb' \u{e9}".into(), String::new()],
            env: vec![("K".into(), "v=1 2".into())],
            ranks: vec![(2, 0, 2), (5, 1, 2)],
            hang_after: 30.0,
        };
        let enc = h.encode();
        assert!(enc.ends_with("start\n"));
        assert_eq!(enc.lines().count(), 15);
        let back = Header::read(&mut std::io::Cursor::new(enc.as_bytes())).unwrap();
        assert_eq!(back, h);
        let e = Header::read(&mut std::io::Cursor::new(b"hxcomm-job 99\n".as_slice())).unwrap_err();
        assert!(e.contains("same hxcomm version"), "{e}");
        let e = Header::read(&mut std::io::Cursor::new(
            b"hxcomm-job 1\nhost zz\n".as_slice(),
        ))
        .unwrap_err();
        assert!(e.contains("bad line"), "{e}");
        let e = Header::read(&mut std::io::Cursor::new(b"hxcomm-job 1\n".as_slice())).unwrap_err();
        assert!(e.contains("before `start`"), "{e}");
    }

    #[test]
    fn paths_for_remote_hosts() {
        let c = Path::new("/work/main");
        assert_eq!(remote_program("./a.out", Some(c)), "/work/main/a.out");
        assert_eq!(remote_program("bin/x", Some(c)), "/work/main/bin/x");
        assert_eq!(remote_program("/usr/bin/x", Some(c)), "/usr/bin/x");
        assert_eq!(remote_program("hxcomm", Some(c)), "hxcomm");
        assert_eq!(
            remote_command("/opt/hx comm/hxcomm"),
            "exec '/opt/hx comm/hxcomm' run-agent"
        );
        assert_eq!(unhex(&hex("a\n\0é")).as_deref(), Some("a\n\0é"));
        assert_eq!(unhex("4"), None);
        assert_eq!(unhex("zz"), None);
    }
}
