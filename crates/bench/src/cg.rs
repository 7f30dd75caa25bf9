//! `hxcomm bench cg`: a conjugate-gradient solve, checked.
//!
//! The matrix is the 5-point Laplacian of an NX x NY grid (zero outside it) plus a diagonal
//! shift s: A = (4 + s) I - neighbours, symmetric positive definite with eigenvalues in
//! (s, 8 + s). Rows are distributed by blocks of grid rows; the matrix-vector product needs one
//! halo row from each neighbouring rank, the two dot products per iteration are allreduces. The
//! right-hand side is b = A x_true for a known pseudo-random x_true (a function of the global
//! index, so the same for any rank count). After the solve it verifies, with a fresh
//! matrix-vector product, that ||b - Ax|| / ||b|| is below a tolerance, that ||x - x_true||
//! is within what that residual allows (at most ||b - Ax|| / s), and that both norms are
//! bit-identical on every rank. bench/mpi_cg.c is the same program over MPI.

use std::time::Instant;

use clap::Args;
use hx_engine::Engine;

use crate::coll::{Coll, EngineTransport, Op, Transport};
use crate::is::{mix, share};

const EP: u16 = 5;

#[derive(Args, Debug, Clone)]
pub struct CgOpts {
    /// Grid width (unknowns per grid row; a halo row is this many values).
    #[arg(long, default_value_t = 1024)]
    pub nx: u64,
    /// Grid height (grid rows in the whole job, split over the ranks).
    #[arg(long, default_value_t = 1024)]
    pub ny: u64,
    /// Grid rows per rank instead of --ny (the problem grows with the ranks).
    #[arg(long)]
    pub rows_per_rank: Option<u64>,
    /// CG iterations (fewer if --tol is reached first).
    #[arg(long, default_value_t = 100)]
    pub iterations: u32,
    /// Stop when the recurrence residual ||r|| / ||b|| is below this.
    #[arg(long)]
    pub tol: Option<f64>,
    /// Diagonal shift s (the smallest eigenvalue is above it; smaller is harder).
    #[arg(long, default_value_t = 0.1)]
    pub shift: f64,
    /// Verification fails if ||b - Ax|| / ||b|| is above this.
    #[arg(long, default_value_t = 1e-6)]
    pub verify_tol: f64,
    /// Print one JSON line instead of the text summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub nx: usize,
    pub ny: usize,
    pub iterations: u32,
    pub tol: f64,
    pub shift: f64,
    pub verify_tol: f64,
}

impl Problem {
    pub fn from_opts(o: &CgOpts, ranks: u32) -> Result<Problem, String> {
        let ny = match o.rows_per_rank {
            Some(r) => r
                .checked_mul(ranks as u64)
                .ok_or("--rows-per-rank is too large")?,
            None => o.ny,
        };
        if o.nx == 0 {
            return Err("--nx must be at least 1".into());
        }
        if ny < ranks as u64 {
            return Err(format!(
                "{} {ny}: at least one grid row per rank ({ranks} ranks)",
                if o.rows_per_rank.is_some() {
                    "--rows-per-rank gives --ny"
                } else {
                    "--ny"
                }
            ));
        }
        if o.nx.checked_mul(ny).is_none_or(|n| n > 1 << 36) {
            return Err(format!("--nx {} x --ny {ny}: too large", o.nx));
        }
        if !(o.shift.is_finite() && o.shift > 0.0) {
            return Err(format!("--shift {}: must be above 0", o.shift));
        }
        if o.iterations == 0 {
            return Err("--iterations must be at least 1".into());
        }
        let tol = o.tol.unwrap_or(0.0);
        if !(tol.is_finite() && tol >= 0.0) {
            return Err(format!("--tol {tol}: must be 0 or above"));
        }
        if !(o.verify_tol.is_finite() && o.verify_tol > 0.0) {
            return Err(format!("--verify-tol {}: must be above 0", o.verify_tol));
        }
        Ok(Problem {
            nx: o.nx as usize,
            ny: ny as usize,
            iterations: o.iterations,
            tol,
            shift: o.shift,
            verify_tol: o.verify_tol,
        })
    }

    pub fn rows(&self) -> u64 {
        (self.nx * self.ny) as u64
    }

    pub fn nonzeros(&self) -> u64 {
        let (nx, ny) = (self.nx as u64, self.ny as u64);
        nx * ny + 2 * ny * (nx - 1) + 2 * nx * (ny - 1)
    }
}

/// The known solution at global index `g`, in [-1, 1).
pub fn x_true(g: u64) -> f64 {
    (mix(g) >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// A vector with one halo grid row above and below this rank's rows.
struct Halo {
    v: Vec<f64>,
    nx: usize,
    rows: usize,
}

impl Halo {
    fn new(nx: usize, rows: usize) -> Halo {
        Halo {
            v: vec![0.0; (rows + 2) * nx],
            nx,
            rows,
        }
    }
    fn inner(&self) -> &[f64] {
        &self.v[self.nx..(self.rows + 1) * self.nx]
    }
    fn inner_mut(&mut self) -> &mut [f64] {
        &mut self.v[self.nx..(self.rows + 1) * self.nx]
    }
}

fn row_bytes(r: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(r.len() * 8);
    for x in r {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Fills the halo rows of `h` from the neighbouring ranks (global boundary rows stay 0).
fn exchange_halo<T: Transport>(c: &mut Coll<T>, h: &mut Halo) -> Result<(), String> {
    let (me, n) = (c.rank(), c.size());
    let nx = h.nx;
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    if me > 0 {
        sends.push((me - 1, row_bytes(&h.v[nx..2 * nx])));
        recvs.push((me - 1, nx * 8));
    }
    if me + 1 < n {
        sends.push((me + 1, row_bytes(&h.v[h.rows * nx..(h.rows + 1) * nx])));
        recvs.push((me + 1, nx * 8));
    }
    let got = c.exchange(sends, &recvs)?;
    for (&(from, _), b) in recvs.iter().zip(got) {
        if b.len() != nx * 8 {
            return Err(format!(
                "halo from rank {from}: {} bytes, expected {}",
                b.len(),
                nx * 8
            ));
        }
        let at = if from < me { 0 } else { (h.rows + 1) * nx };
        for (d, s) in h.v[at..at + nx].iter_mut().zip(b.chunks_exact(8)) {
            *d = f64::from_le_bytes(s.try_into().expect("8 bytes"));
        }
    }
    Ok(())
}

/// `out = A p` for this rank's rows (`p`'s halo rows filled).
fn matvec(p: &Halo, shift: f64, out: &mut [f64]) {
    let (nx, d) = (p.nx, 4.0 + shift);
    for i in 0..p.rows {
        let up = &p.v[i * nx..(i + 1) * nx];
        let c = &p.v[(i + 1) * nx..(i + 2) * nx];
        let dn = &p.v[(i + 2) * nx..(i + 3) * nx];
        let o = &mut out[i * nx..(i + 1) * nx];
        if nx == 1 {
            o[0] = d * c[0] - up[0] - dn[0];
            continue;
        }
        o[0] = d * c[0] - up[0] - dn[0] - c[1];
        for j in 1..nx - 1 {
            o[j] = d * c[j] - up[j] - dn[j] - c[j - 1] - c[j + 1];
        }
        o[nx - 1] = d * c[nx - 1] - up[nx - 1] - dn[nx - 1] - c[nx - 2];
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn global_dot<T: Transport>(c: &mut Coll<T>, a: &[f64], b: &[f64]) -> Result<f64, String> {
    let mut v = [dot(a, b)];
    c.allreduce(&mut v, Op::Sum)?;
    Ok(v[0])
}

/// What a run measured and found (the same on every rank).
#[derive(Debug, Clone)]
pub struct Report {
    pub problem: Problem,
    pub ranks: u32,
    pub iterations: u32,
    /// The slowest rank's: whole solve, compute and communication, per iteration.
    pub iteration_s: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    /// ||b - Ax|| / ||b|| from a fresh product; the recurrence's ||r|| / ||b||.
    pub residual: f64,
    pub recurrence_residual: f64,
    /// ||x - x_true|| / ||x_true|| and the bound the residual puts on it.
    pub error: f64,
    pub error_bound: f64,
    pub failure: Option<String>,
}

/// The whole kernel on any transport: set up b = A x_true, solve, verify.
pub fn kernel<T: Transport>(c: &mut Coll<T>, p: &Problem) -> Result<Report, String> {
    let (me, n) = (c.rank(), c.size());
    let (r0, r1) = share(p.ny as u64, me, n);
    let (nx, rows) = (p.nx, (r1 - r0) as usize);
    let m = nx * rows;
    let first = r0 * nx as u64;
    let xt: Vec<f64> = (0..m as u64).map(|i| x_true(first + i)).collect();
    let mut ph = Halo::new(nx, rows);
    ph.inner_mut().copy_from_slice(&xt);
    exchange_halo(c, &mut ph)?;
    let mut b = vec![0.0; m];
    matvec(&ph, p.shift, &mut b);

    // CG from x = 0.
    let mut x = vec![0.0; m];
    let mut r = b.clone();
    let mut q = vec![0.0; m];
    ph.v.fill(0.0);
    ph.inner_mut().copy_from_slice(&r);
    let mut rr = global_dot(c, &r, &r)?;
    let bnorm = rr.sqrt();
    c.barrier()?;
    let comm0 = c.comm_time();
    let t0 = Instant::now();
    let mut done = 0;
    while done < p.iterations {
        exchange_halo(c, &mut ph)?;
        matvec(&ph, p.shift, &mut q);
        let pq = global_dot(c, ph.inner(), &q)?;
        // Converged to the last bit (the same on every rank): another step would divide by 0.
        if !(pq > 0.0 && rr > 0.0) {
            break;
        }
        let alpha = rr / pq;
        for ((xi, ri), (pi, qi)) in x
            .iter_mut()
            .zip(r.iter_mut())
            .zip(ph.inner().iter().zip(&q))
        {
            *xi += alpha * pi;
            *ri -= alpha * qi;
        }
        let rr_new = global_dot(c, &r, &r)?;
        let beta = rr_new / rr;
        rr = rr_new;
        for (pi, ri) in ph.inner_mut().iter_mut().zip(&r) {
            *pi = ri + beta * *pi;
        }
        done += 1;
        // rr is bit-identical on every rank, so all stop together.
        if rr.sqrt() <= p.tol * bnorm {
            break;
        }
    }
    let total = t0.elapsed().as_secs_f64();
    let comm = (c.comm_time() - comm0).as_secs_f64();
    let mut times = [total, total - comm, comm];
    c.allreduce(&mut times, Op::Max)?;

    // Verification with a fresh product.
    ph.v.fill(0.0);
    ph.inner_mut().copy_from_slice(&x);
    exchange_halo(c, &mut ph)?;
    matvec(&ph, p.shift, &mut q);
    let mut sums = [0.0f64; 3];
    for i in 0..m {
        let res = b[i] - q[i];
        let err = x[i] - xt[i];
        sums[0] += res * res;
        sums[1] += err * err;
        sums[2] += xt[i] * xt[i];
    }
    c.allreduce(&mut sums, Op::Sum)?;
    let (res, err, xnorm) = (sums[0].sqrt(), sums[1].sqrt(), sums[2].sqrt());
    let residual = res / bnorm;
    let recurrence_residual = rr.sqrt() / bnorm;
    let error = err / xnorm;
    let error_bound = res / p.shift / xnorm;
    let mine = [
        residual.to_bits(),
        error.to_bits(),
        recurrence_residual.to_bits(),
    ];
    let all = c.allgather_u64(&mine)?;
    let failure = if let Some(r) = all.iter().position(|v| v[..] != mine[..]) {
        Some(format!(
            "rank {r} has other norms than rank {me}: {:?} vs {:?}",
            all[r]
                .iter()
                .map(|&b| f64::from_bits(b))
                .collect::<Vec<_>>(),
            [residual, error, recurrence_residual]
        ))
    } else if residual.is_nan() || residual > p.verify_tol {
        Some(format!(
            "||b - Ax|| / ||b|| = {residual:e} after {done} iterations, above --verify-tol {:e} (more --iterations?)",
            p.verify_tol
        ))
    } else if error.is_nan() || error > error_bound * (1.0 + 1e-6) + 1e-12 {
        Some(format!(
            "||x - x_true|| / ||x_true|| = {error:e}, above the {error_bound:e} the residual allows"
        ))
    } else {
        None
    };
    let per = |s: f64| s / done.max(1) as f64;
    Ok(Report {
        problem: *p,
        ranks: n,
        iterations: done,
        iteration_s: per(times[0]),
        compute_s: per(times[1]),
        comm_s: per(times[2]),
        residual,
        recurrence_residual,
        error,
        error_bound,
        failure,
    })
}

impl Report {
    /// Floating-point operations per iteration: the product (one multiply per row, one
    /// subtraction per off-diagonal), two dot products and three vector updates.
    pub fn mflops(&self) -> f64 {
        let rows = self.problem.rows() as f64;
        (self.problem.nonzeros() as f64 + 10.0 * rows) / self.iteration_s / 1e6
    }

    pub fn print(&self, json: bool) {
        let p = &self.problem;
        if json {
            println!(
                "{}",
                serde_json::json!({"bench": "cg", "impl": "hxcomm", "ranks": self.ranks,
                    "nx": p.nx, "ny": p.ny, "rows": p.rows(), "nonzeros": p.nonzeros(),
                    "shift": p.shift, "iterations": self.iterations,
                    "seconds_per_iteration": self.iteration_s,
                    "compute_s": self.compute_s, "comm_s": self.comm_s,
                    "mflops": self.mflops(), "residual": self.residual,
                    "recurrence_residual": self.recurrence_residual, "error": self.error,
                    "error_bound": self.error_bound,
                    "verified": self.failure.is_none(), "failure": self.failure})
            );
            return;
        }
        println!(
            "CG (hxcomm): {} ranks, {} x {} grid, {} rows, {} nonzeros, shift {}, {} iterations",
            self.ranks,
            p.nx,
            p.ny,
            p.rows(),
            p.nonzeros(),
            p.shift,
            self.iterations
        );
        println!(
            "CG (hxcomm): {:.6} s per iteration (compute {:.6} s, communication {:.6} s), {:.1} Mflop/s",
            self.iteration_s,
            self.compute_s,
            self.comm_s,
            self.mflops()
        );
        match &self.failure {
            None => println!(
                "CG (hxcomm): verification SUCCESSFUL: ||b-Ax||/||b|| = {:.3e} (recurrence {:.3e}), ||x-x_true||/||x_true|| = {:.3e} (bound {:.3e}), equal on every rank",
                self.residual, self.recurrence_residual, self.error, self.error_bound
            ),
            Some(f) => println!("CG (hxcomm): verification FAILED: {f}"),
        }
    }
}

pub fn run(o: &CgOpts) -> Result<(), String> {
    // What does not depend on the rank count is checked before joining the job.
    Problem::from_opts(o, 1)?;
    let e = Engine::init().map_err(|e| e.to_string())?;
    let p = Problem::from_opts(o, e.size())?;
    let mut c = Coll::new(EngineTransport::new(e, EP)?);
    let report = kernel(&mut c, &p)?;
    if c.rank() == 0 {
        report.print(o.json);
    }
    c.t.engine.finalize().map_err(|e| e.to_string())?;
    match report.failure {
        None => Ok(()),
        Some(f) => Err(format!("cg: verification failed: {f}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::mem;

    fn opts() -> CgOpts {
        CgOpts {
            nx: 17,
            ny: 13,
            rows_per_rank: None,
            iterations: 200,
            tol: Some(1e-12),
            shift: 0.1,
            verify_tol: 1e-9,
            json: false,
        }
    }

    #[test]
    fn solves_and_verifies_on_any_rank_count() {
        let mut errors = Vec::new();
        for n in 1..=6u32 {
            let p = Problem::from_opts(&opts(), n).unwrap();
            let reports = mem::run(n, |mut c| kernel(&mut c, &p).unwrap());
            for r in &reports {
                assert_eq!(r.failure, None, "n={n}: {r:?}");
                assert!(r.error < 1e-9, "n={n}: {r:?}");
            }
            errors.push(reports[0].error);
        }
        // Few iterations: the same iterates, whatever the split, up to rounding.
        let mut o = opts();
        o.iterations = 5;
        o.tol = None;
        o.verify_tol = 1.0;
        let res: Vec<f64> = (1..=5u32)
            .map(|n| {
                let p = Problem::from_opts(&o, n).unwrap();
                mem::run(n, |mut c| kernel(&mut c, &p).unwrap())[0].residual
            })
            .collect();
        for r in &res {
            assert!((r - res[0]).abs() <= 1e-12 * res[0], "{res:?}");
        }
        assert!(res[0] > 1e-6, "{res:?}");
    }

    #[test]
    fn matvec_matches_the_stencil() {
        // 3 x 2 grid, one rank: A x for x = 1..6 by hand.
        let mut h = Halo::new(3, 2);
        h.inner_mut()
            .copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let mut out = vec![0.0; 6];
        matvec(&h, 0.0, &mut out);
        assert_eq!(
            out,
            vec![
                4.0 - 2.0 - 4.0,
                8.0 - 1.0 - 3.0 - 5.0,
                12.0 - 2.0 - 6.0,
                16.0 - 1.0 - 5.0,
                20.0 - 4.0 - 6.0 - 2.0,
                24.0 - 5.0 - 3.0
            ]
        );
    }

    #[test]
    fn too_few_iterations_fail_verification() {
        let mut o = opts();
        o.iterations = 2;
        o.tol = None;
        let p = Problem::from_opts(&o, 3).unwrap();
        for r in mem::run(3, |mut c| kernel(&mut c, &p).unwrap()) {
            assert!(r.failure.unwrap().contains("--verify-tol"));
        }
    }

    #[test]
    fn bad_options_are_errors() {
        let ok = opts();
        assert!(Problem::from_opts(&ok, 4).is_ok());
        let bad = [
            CgOpts {
                nx: 0,
                ..ok.clone()
            },
            CgOpts {
                ny: 3,
                ..ok.clone()
            },
            CgOpts {
                rows_per_rank: Some(0),
                ..ok.clone()
            },
            CgOpts {
                iterations: 0,
                ..ok.clone()
            },
            CgOpts {
                shift: 0.0,
                ..ok.clone()
            },
            CgOpts {
                shift: f64::NAN,
                ..ok.clone()
            },
            CgOpts {
                tol: Some(-1.0),
                ..ok.clone()
            },
            CgOpts {
                verify_tol: 0.0,
                ..ok.clone()
            },
            CgOpts {
                nx: u64::MAX,
                ..ok.clone()
            },
        ];
        for o in bad {
            assert!(Problem::from_opts(&o, 4).is_err(), "{o:?}");
        }
        assert_eq!(
            Problem::from_opts(
                &CgOpts {
                    rows_per_rank: Some(5),
                    ..ok
                },
                4
            )
            .unwrap()
            .ny,
            20
        );
    }
}
