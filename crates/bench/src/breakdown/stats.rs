//! Percentiles of nanosecond samples.

/// Nearest-rank percentile `p` (0..=100) of sorted samples; `None` if there are none.
pub fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Median, p90, p99 and mean of a set of samples (nanoseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Summary {
    /// Sorts `v` in place; all zero when `v` is empty.
    pub fn of(v: &mut [i64]) -> Summary {
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_unstable();
        let at = |p| percentile(v, p).unwrap_or(0) as f64;
        Summary {
            n: v.len(),
            p50: at(50.0),
            p90: at(90.0),
            p99: at(99.0),
            mean: v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64,
        }
    }
}

/// Microseconds from nanoseconds, rounded to 3 decimals (for JSON).
pub fn us(ns: f64) -> f64 {
    (ns / 1e3 * 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7], 50.0), Some(7));
        assert_eq!(percentile(&[7], 0.0), Some(7));
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 150.0), Some(100));
        assert_eq!(percentile(&[1, 2, 3, 4], 50.0), Some(2));
    }

    #[test]
    fn summaries() {
        let mut v = vec![30, -10, 20, 10, 1000];
        let s = Summary::of(&mut v);
        assert_eq!(v, [-10, 10, 20, 30, 1000]);
        assert_eq!((s.n, s.p50, s.p90, s.p99), (5, 20.0, 1000.0, 1000.0));
        assert_eq!(s.mean, 210.0);
        assert_eq!(Summary::of(&mut []), Summary::default());
        assert_eq!(us(1234.0), 1.234);
        assert_eq!(us(1234.5678), 1.235);
    }
}
