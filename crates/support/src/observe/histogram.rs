//! A request-duration histogram updated with atomics only (issue 15 §1: no lock on the relay
//! path). prometheus-client's `Histogram` takes a write lock per observation; this one adds to
//! one bucket counter, the count and the sum (in nanoseconds), each an `AtomicU64`, and gives
//! the same OpenMetrics output. A scrape may see an observation in the count and not yet in
//! the sum (or the reverse), as with any lock-free histogram; every counter only grows.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Upper bounds in seconds: 1 ms doubling to about 65 s (17 buckets), then `+Inf`.
// Evaluated at compile time: an index out of bounds would be a build error, not a panic.
#[allow(clippy::indexing_slicing)]
pub(crate) const BOUNDS: [f64; 17] = {
    let mut b = [0.0; 17];
    let mut i = 0;
    let mut v = 0.001;
    while i < 17 {
        b[i] = v;
        v *= 2.0;
        i += 1;
    }
    b
};

/// Request durations in seconds, bucketed by [`BOUNDS`]. Cheap to clone (an `Arc`); clones
/// share the counters.
#[derive(Debug, Clone, Default)]
pub struct DurationHistogram(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    /// One per bound, then `+Inf`; not cumulative (the encoder sums them).
    buckets: [AtomicU64; BOUNDS.len() + 1],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl DurationHistogram {
    /// Records one duration of `seconds` (negative or NaN counts as 0).
    pub fn observe(&self, seconds: f64) {
        let c = &*self.0;
        // `max` returns the other operand for NaN.
        let seconds = seconds.max(0.0);
        let slot = BOUNDS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BOUNDS.len());
        if let Some(b) = c.buckets.get(slot) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        c.count.fetch_add(1, Ordering::Relaxed);
        // `as` saturates: huge values become u64::MAX.
        c.sum_nanos
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    /// (sum in seconds, count, (upper bound, observations in that bucket) per bucket).
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let c = &*self.0;
        let buckets = BOUNDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .zip(c.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let sum = c.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (sum, c.count.load(Ordering::Relaxed), buckets)
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
    use prometheus_client::registry::Registry;

    fn render(register: impl FnOnce(&mut Registry)) -> String {
        let mut r = Registry::default();
        register(&mut r);
        let mut out = String::new();
        encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn renders_as_prometheus_clients_histogram_with_the_same_buckets() {
        let values = [0.0, 0.0004, 0.001, 0.0015, 0.25, 3.0, 70.0, 1e6];
        let ours = DurationHistogram::default();
        let theirs = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        for v in values {
            ours.observe(v);
            theirs.observe(v);
        }
        let a = render(|r| r.register("d", "h", ours.clone()));
        let b = render(|r| r.register("d", "h", theirs.clone()));
        // The sum is kept in nanoseconds: equal to within rounding.
        let strip = |s: &str| {
            s.lines()
                .filter(|l| !l.starts_with("d_sum"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(strip(&a), strip(&b));
        assert!(a.contains("d_count 8"), "{a}");
        assert!(a.contains("d_bucket{le=\"0.001\"} 3"), "{a}");
    }

    #[test]
    fn clones_share_the_counters_and_nonsense_counts_as_zero() {
        let h = DurationHistogram::default();
        h.clone().observe(f64::NAN);
        h.observe(-1.0);
        let (sum, count, buckets) = h.snapshot();
        assert_eq!((sum, count), (0.0, 2));
        assert_eq!(buckets.first().map(|b| b.1), Some(2));
    }
}
