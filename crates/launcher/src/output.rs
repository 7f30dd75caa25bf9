//! Forwarding a rank's stdout/stderr line by line, optionally prefixed with `[rank] `.
//!
//! Why it is built this way: one reader thread per pipe is the simplest way to never block a rank
//! on a full pipe; each line is written whole under the sink's lock, so lines of different ranks
//! never interleave mid-line. Lines are cut at [`MAX_LINE`] bytes so a rank printing without
//! newlines cannot make the launcher buffer without bound.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// Where forwarded output goes; shared by all ranks' reader threads.
pub type Sink = Arc<Mutex<dyn Write + Send>>;

/// Longest piece forwarded as one line.
pub const MAX_LINE: usize = 64 * 1024;

/// Starts a thread copying `pipe` to `sink`; it sends on `done` when the pipe is closed.
pub fn forward(
    pipe: impl Read + Send + 'static,
    prefix: Option<String>,
    sink: Sink,
    done: Sender<()>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("hx-run-output".into())
        .spawn(move || {
            let mut r = BufReader::new(pipe);
            let mut line = Vec::with_capacity(256);
            let mut out = Vec::with_capacity(256);
            loop {
                line.clear();
                match (&mut r).take(MAX_LINE as u64).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                out.clear();
                if let Some(p) = &prefix {
                    out.extend_from_slice(p.as_bytes());
                }
                out.extend_from_slice(&line);
                if out.last() != Some(&b'\n') {
                    out.push(b'\n');
                }
                let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                // A closed stdout of our own must not stop the rank: keep draining its pipe.
                let _ = s.write_all(&out);
                let _ = s.flush();
            }
            let _ = done.send(());
        })
        .map(|_| ())
}
