//! Whether an agent kept up with the time it models: the fidelity monitor's bookkeeping.
//!
//! An emulator's figures hold only while its agents keep up. Mininet-HiFi (Handigol et al., CoNEXT 2012)
//! checks invariants during the run: on a busy link, consecutive departures are one transmission time apart;
//! where they are not, the emulation stopped telling the truth. Three measures, each fed with times the agent
//! already has, a few operations per sample and fixed memory:
//!
//! - the link invariant, per egress ([`EgressWire`]): a frame that could have started on the wire at `ideal`
//!   but started at `start` stalled the wire for `start - ideal`;
//! - processing lag ([`Durations`]): from the kernel's receive time stamp to processing;
//! - timer lateness ([`Durations`]): from a deadline to the moment the agent acted on it.
//!
//! [`verdict`] judges the figures against [`Thresholds`] (docs/architecture.md, "Fidelity"), with the Python
//! model's reasons to the character.
use std::fmt::Write;

/// Quarter-octave buckets: a quantile is reported as its bucket's upper bound, at most 25% high.
const FRACTION_BITS: u32 = 2;
/// Bucket 0 holds 0 ns, then four per octave of a 64-bit duration.
pub const BUCKETS: usize = 1 + 64 * (1 << FRACTION_BITS);

/// The bucket of a duration: 0 for 0 ns, then four per octave.
fn bucket(value_ns: u64) -> usize {
    if value_ns == 0 {
        return 0;
    }
    let octave = value_ns.ilog2();
    let fraction = ((u128::from(value_ns) << FRACTION_BITS) >> octave) & ((1 << FRACTION_BITS) - 1);
    let bucket = 1 + ((octave as usize) << FRACTION_BITS) + fraction as usize;
    bucket.min(BUCKETS - 1)
}

/// The largest duration that falls in `bucket`.
fn upper(bucket: usize) -> u64 {
    if bucket == 0 {
        return 0;
    }
    let octave = (bucket - 1) >> FRACTION_BITS;
    let fraction = (bucket - 1) & ((1 << FRACTION_BITS) - 1);
    let top = ((1u128 << FRACTION_BITS) + fraction as u128 + 1) << octave >> FRACTION_BITS;
    let top = if octave >= FRACTION_BITS as usize {
        top - 1
    } else {
        top
    };
    u64::try_from(top).unwrap_or(u64::MAX)
}

/// Why a quantile cannot be ranked: Python's `int()` of a float that is no number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantileError {
    /// `q` times the count is NaN (Python raises `ValueError`).
    NotANumber,
    /// `q` times the count is infinite (Python raises `OverflowError`).
    Infinite,
}

/// A histogram of durations in ns: count, exact maximum, quantiles within a quarter octave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durations {
    counts: [u64; BUCKETS],
    count: u64,
    max_ns: u64,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            counts: [0; BUCKETS],
            count: 0,
            max_ns: 0,
        }
    }
}

/// What [`Durations::summary`] reports: `None` where there is no sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationsSummary {
    pub count: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
}

impl Durations {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Samples per bucket.
    pub fn counts(&self) -> &[u64; BUCKETS] {
        &self.counts
    }

    /// Samples so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The longest sample, exact (0 with none).
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Counts one duration (a negative lateness is 0 to the caller, which clamps it before).
    pub fn add(&mut self, value_ns: u64) {
        let slot = &mut self.counts[bucket(value_ns)];
        *slot = slot.saturating_add(1);
        self.count = self.count.saturating_add(1);
        self.max_ns = self.max_ns.max(value_ns);
    }

    /// The sample rank of the `q` quantile as the Python model computes it: `ceil(int(q * count * 1e6) / 1e6)`,
    /// at least 1 (the micro-units keep `0.99 * 100` from ranking 100 for 99).
    fn rank(&self, q: f64) -> Result<u128, QuantileError> {
        let scaled = q * self.count as f64 * 1_000_000.0;
        if scaled.is_nan() {
            return Err(QuantileError::NotANumber);
        }
        if scaled.is_infinite() {
            return Err(QuantileError::Infinite);
        }
        if scaled < 1.0 {
            return Ok(1);
        }
        // Finite and at least 1; `as` saturates beyond u128, where no rank is ever reached anyway.
        let micro = scaled as u128;
        Ok(micro / 1_000_000 + u128::from(micro % 1_000_000 != 0))
    }

    /// The `q` quantile (0 < q <= 1), rounded up to its bucket's bound and never above the maximum; `None`
    /// without samples.
    pub fn quantile(&self, q: f64) -> Result<Option<u64>, QuantileError> {
        if self.count == 0 {
            return Ok(None);
        }
        let rank = self.rank(q)?;
        let mut seen = 0u128;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += u128::from(count);
            if seen >= rank {
                return Ok(Some(upper(bucket).min(self.max_ns)));
            }
        }
        Ok(Some(self.max_ns))
    }

    /// A quantile at a constant `q` of ours (never NaN or infinite times a count).
    fn fixed_quantile(&self, q: f64) -> Option<u64> {
        self.quantile(q).unwrap_or(Some(self.max_ns))
    }

    /// Adds `other`'s samples: the merged histogram answers as if it had seen them all.
    pub fn merge(&mut self, other: &Durations) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(*theirs);
        }
        self.count = self.count.saturating_add(other.count);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Count, median, p99 and maximum.
    pub fn summary(&self) -> DurationsSummary {
        DurationsSummary {
            count: self.count,
            p50_ns: self.fixed_quantile(0.5),
            p99_ns: self.fixed_quantile(0.99),
            max_ns: (self.count != 0).then_some(self.max_ns),
        }
    }
}

/// The link invariant of one egress: busy time, and the time the wire idled while a frame waited.
///
/// The fields are public because agents that count bytes themselves set `busy_ns` and `frames` directly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressWire {
    pub busy_ns: u64,
    pub stall_ns: u64,
    pub longest_stall_ns: u64,
    pub frames: u64,
}

/// What [`EgressWire::summary`] reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EgressWireSummary {
    pub frames: u64,
    pub busy_ns: u64,
    pub stall_ns: u64,
    /// Stall time over busy time; 0 on a wire that was never busy.
    pub stall_share: f64,
    pub longest_stall_ns: u64,
}

impl EgressWire {
    /// A wire with nothing sent.
    pub fn new() -> Self {
        Self::default()
    }

    /// `frames` frames took the wire at `start_ns` for `frame_ns` together; they could have started at
    /// `ideal_ns` (the later of when the wire became free and when they were ready). A start after it is a
    /// stall the modelled link would not have had.
    pub fn departed(&mut self, start_ns: u64, ideal_ns: u64, frame_ns: u64, frames: u64) {
        self.frames = self.frames.saturating_add(frames);
        self.busy_ns = self.busy_ns.saturating_add(frame_ns);
        if start_ns > ideal_ns {
            self.stalled(start_ns - ideal_ns);
        }
    }

    /// The wire idled `stall_ns` while a frame waited (for callers that keep busy time themselves).
    pub fn stalled(&mut self, stall_ns: u64) {
        self.stall_ns = self.stall_ns.saturating_add(stall_ns);
        self.longest_stall_ns = self.longest_stall_ns.max(stall_ns);
    }

    /// Adds `other`'s figures (the longest stall is the longer of the two).
    pub fn merge(&mut self, other: &EgressWire) {
        self.busy_ns = self.busy_ns.saturating_add(other.busy_ns);
        self.stall_ns = self.stall_ns.saturating_add(other.stall_ns);
        self.longest_stall_ns = self.longest_stall_ns.max(other.longest_stall_ns);
        self.frames = self.frames.saturating_add(other.frames);
    }

    /// Stall time over busy time, as Python's `int / int`; `None` on a wire that was never busy.
    fn stall_share(&self) -> Option<f64> {
        (self.busy_ns != 0).then(|| true_div(self.stall_ns, self.busy_ns))
    }

    /// Frames, busy time, stall time, its share of the busy time and the longest stall.
    pub fn summary(&self) -> EgressWireSummary {
        EgressWireSummary {
            frames: self.frames,
            busy_ns: self.busy_ns,
            stall_ns: self.stall_ns,
            stall_share: self.stall_share().unwrap_or(0.0),
            longest_stall_ns: self.longest_stall_ns,
        }
    }
}

/// What the monitor accepts: link figures in frame times of the link (one MTU-sized frame at its rate).
///
/// Timers are judged by what they govern: a late PFC hold expiry, paced departure, delay line or credit
/// update idles a link, so it must be on time within a frame; a timed start late by a frame delays a
/// collective by a frame; a retransmission or RNR timer already waits thousands of frames, so it is judged
/// against its own timeout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Wire stalls below this share of busy time.
    pub stall_share: f64,
    /// Processing lag p99 below this many frame times.
    pub lag_p99_frames: f64,
    /// Link timers: lateness p99 below this many frame times.
    pub timer_p99_frames: f64,
    /// Timed starts: lateness p99 below this many frame times.
    pub start_p99_frames: f64,
    /// Retransmission and RNR timers: lateness p99 below this share of the timeout.
    pub timeout_p99_share: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            stall_share: 0.01,
            lag_p99_frames: 1.0,
            timer_p99_frames: 1.0,
            start_p99_frames: 1.0,
            timeout_p99_share: 0.01,
        }
    }
}

/// Whether an agent kept up, and why not (one line each; empty when faithful).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub faithful: bool,
    pub reasons: Vec<String>,
}

/// The figures one agent (or a merged run) gives the monitor.
#[derive(Clone, Copy, Debug)]
pub struct Figures<'a> {
    pub wire: &'a EgressWire,
    /// Processing lag.
    pub lag: &'a Durations,
    /// The link timers' lateness.
    pub timers: &'a Durations,
    /// The timed starts' lateness, where the agent has any.
    pub starts: Option<&'a Durations>,
    /// The retransmission and RNR timers' lateness, where the agent has any.
    pub timeouts: Option<&'a Durations>,
}

/// Judges `figures`; `frame_ns` is one MTU-sized frame at the link rate, `timeout_ns` the timeout the
/// retransmission timers are judged against. An agent whose monitor was off (`monitored` false, as only the
/// monitor's cost benchmark runs it) is never called faithful.
pub fn verdict(
    figures: &Figures<'_>,
    frame_ns: u64,
    timeout_ns: u64,
    thresholds: &Thresholds,
    monitored: bool,
) -> Verdict {
    let mut reasons = Vec::new();
    if !monitored {
        reasons.push(
            "the fidelity monitor was off: nothing says whether the agent kept up".to_owned(),
        );
    }
    let wire = figures.wire;
    if let Some(share) = wire
        .stall_share()
        .filter(|&share| share >= thresholds.stall_share)
    {
        reasons.push(format!(
            "the wire stalled {} of its busy time (longest {} us) while frames waited for a CPU",
            percent(share, 1),
            fixed(true_div(wire.longest_stall_ns, 1000), 0)
        ));
    }
    let frame = format!("frame time ({} us)", fixed(true_div(frame_ns, 1000), 0));
    let over_frames = |p99: u64, frames: f64| at_least(p99, frames * frame_ns as f64);
    if let Some(p99) = figures.lag.fixed_quantile(0.99) {
        if over_frames(p99, thresholds.lag_p99_frames) {
            reasons.push(format!(
                "processing lag p99 {} us, over {} {frame}",
                micros(p99),
                general(thresholds.lag_p99_frames)
            ));
        }
    }
    if let Some(p99) = figures.timers.fixed_quantile(0.99) {
        if over_frames(p99, thresholds.timer_p99_frames) {
            reasons.push(format!(
                "link timers late by {} us at p99, over {} {frame}",
                micros(p99),
                general(thresholds.timer_p99_frames)
            ));
        }
    }
    if let Some(p99) = figures
        .starts
        .and_then(|starts| starts.fixed_quantile(0.99))
    {
        if over_frames(p99, thresholds.start_p99_frames) {
            reasons.push(format!(
                "timed starts late by {} us at p99, over {} {frame}",
                micros(p99),
                general(thresholds.start_p99_frames)
            ));
        }
    }
    if let Some(p99) = figures
        .timeouts
        .and_then(|timeouts| timeouts.fixed_quantile(0.99))
    {
        if at_least(p99, thresholds.timeout_p99_share * timeout_ns as f64) {
            reasons.push(format!(
                "retransmission timers late by {} us at p99, over {} of the timeout ({} us)",
                micros(p99),
                percent(thresholds.timeout_p99_share, 0),
                micros(timeout_ns)
            ));
        }
    }
    Verdict {
        faithful: reasons.is_empty(),
        reasons,
    }
}

// --- Python's arithmetic and formatting, to the bit and the character ---------------------------------------

/// `a / b` as Python divides two ints: correctly rounded (`b` non-zero), where `a as f64 / b as f64` would
/// round twice above 2^53.
fn true_div(a: u64, b: u64) -> f64 {
    const EXACT: u64 = 1 << 53;
    if a == 0 || (a <= EXACT && b <= EXACT) {
        return a as f64 / b as f64;
    }
    // Shift `a` to the top of 128 bits: the quotient then has at least 64 significant bits, and a non-zero
    // remainder sets the lowest (sticky) bit, below the rounding position, so one rounding is exact.
    let shift = 64 + a.leading_zeros();
    let scaled = u128::from(a) << shift;
    let divisor = u128::from(b);
    let quotient = (scaled / divisor) | u128::from(scaled % divisor != 0);
    quotient as f64 / 2f64.powi(shift as i32)
}

/// Python's `int >= float`, exact (no rounding of the integer to a float).
fn at_least(value: u64, bound: f64) -> bool {
    if bound.is_nan() {
        return false;
    }
    if bound <= 0.0 {
        return true;
    }
    // 2^64 and above: no u64 reaches it. Below, `value >= bound` for an integer is `value >= ceil(bound)`.
    bound < 18_446_744_073_709_551_616.0 && value >= bound.ceil() as u64
}

/// Python's `f"{x:.{precision}f}"`: Rust rounds the exact binary value half to even as Python does; NaN and
/// infinities are spelled as Python spells them.
fn fixed(x: f64, precision: usize) -> String {
    match special(x) {
        Some(text) => text.to_owned(),
        None => format!("{x:.precision$}"),
    }
}

/// Python's `f"{x:.{precision}%}"`: times 100 as a float, fixed-point, then `%`.
fn percent(x: f64, precision: usize) -> String {
    let mut text = fixed(x * 100.0, precision);
    text.push('%');
    text
}

/// `f"{ns / 1000:.0f}"`: a duration in whole microseconds, as the reasons print it.
fn micros(ns: u64) -> String {
    fixed(true_div(ns, 1000), 0)
}

/// Python's spelling of NaN and the infinities; `None` for a finite number.
fn special(x: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("nan")
    } else if x == f64::INFINITY {
        Some("inf")
    } else if x == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// Python's `f"{x:g}"`: six significant digits, scientific below 1e-4 and from 1e6, no trailing zeros.
fn general(x: f64) -> String {
    const PRECISION: i32 = 6;
    if let Some(text) = special(x) {
        return text.to_owned();
    }
    // The exponent after rounding to six digits decides the style, as in Python.
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, x);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..PRECISION).contains(&exponent) {
        let decimals = (PRECISION - 1 - exponent) as usize;
        return strip_zeros(&format!("{x:.decimals$}"));
    }
    let mut text = strip_zeros(mantissa);
    let sign = if exponent < 0 { '-' } else { '+' };
    let _ = write!(text, "e{sign}{:02}", exponent.unsigned_abs());
    text
}

/// Drops trailing zeros after a decimal point, and the point if nothing follows it.
fn strip_zeros(text: &str) -> String {
    if !text.contains('.') {
        return text.to_owned();
    }
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FRAME_NS: u64 = 1514 * 8 * 1_000_000_000 / 20_000_000; // one MTU-sized frame at 20 Mbit/s

    fn durations(values: &[u64]) -> Durations {
        let mut histogram = Durations::new();
        for &value in values {
            histogram.add(value);
        }
        histogram
    }

    #[test]
    fn buckets_are_quarter_octaves() {
        assert_eq!(
            (bucket(0), bucket(1), bucket(2), bucket(3), bucket(4)),
            (0, 1, 5, 7, 9)
        );
        assert_eq!(
            (upper(0), upper(1), upper(5), upper(9), upper(10)),
            (0, 1, 2, 4, 5)
        );
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(upper(BUCKETS - 1), u64::MAX);
        for value in [5u64, 7, 100, 1_000_000, 1 << 40, u64::MAX / 3] {
            let b = bucket(value);
            assert!(upper(b - 1) < value && value <= upper(b), "{value}");
        }
    }

    #[test]
    fn no_samples_no_figures() {
        let empty = Durations::new();
        assert_eq!(empty.quantile(0.99), Ok(None));
        let summary = empty.summary();
        assert_eq!(
            (summary.count, summary.p50_ns, summary.max_ns),
            (0, None, None)
        );
    }

    #[test]
    fn a_quantile_that_is_no_number_is_an_error() {
        let one = durations(&[5]);
        assert_eq!(one.quantile(f64::NAN), Err(QuantileError::NotANumber));
        assert_eq!(one.quantile(f64::INFINITY), Err(QuantileError::Infinite));
        assert_eq!(one.quantile(-3.0), Ok(Some(5)));
        assert_eq!(one.quantile(1e300), Ok(Some(5)));
    }

    #[test]
    fn a_late_wake_up_is_a_stall_of_the_wire() {
        let mut wire = EgressWire::new();
        let mut free_at = 0;
        for late in [0; 90].into_iter().chain([50_000; 9]).chain([2_000_000]) {
            let start = free_at + late;
            wire.departed(start, free_at, FRAME_NS, 1);
            free_at = start + FRAME_NS;
        }
        let summary = wire.summary();
        assert_eq!(summary.stall_ns, 9 * 50_000 + 2_000_000);
        assert_eq!(summary.longest_stall_ns, 2_000_000);
        assert_eq!(summary.frames, 100);
    }

    #[test]
    fn each_measure_alone_makes_a_run_unfaithful_and_says_why() {
        let mut wire = EgressWire::new();
        wire.departed(FRAME_NS * 21, FRAME_NS, FRAME_NS * 1000, 1000);
        let empty = Durations::new();
        let figures = Figures {
            wire: &wire,
            lag: &empty,
            timers: &empty,
            starts: None,
            timeouts: None,
        };
        let stalled = verdict(&figures, FRAME_NS, 0, &Thresholds::default(), true);
        assert_eq!(
            stalled.reasons,
            ["the wire stalled 2.0% of its busy time (longest 12112 us) while frames waited for a CPU"]
        );
        let late = durations(&[2_000_000; 100]);
        let quiet = EgressWire::new();
        let figures = Figures {
            wire: &quiet,
            lag: &late,
            timers: &empty,
            starts: None,
            timeouts: Some(&late),
        };
        let judged = verdict(
            &figures,
            FRAME_NS,
            100_000_000,
            &Thresholds::default(),
            false,
        );
        assert_eq!(
            judged.reasons,
            [
                "the fidelity monitor was off: nothing says whether the agent kept up",
                "processing lag p99 2000 us, over 1 frame time (606 us)",
                "retransmission timers late by 2000 us at p99, over 1% of the timeout (100000 us)",
            ]
        );
        assert!(!judged.faithful);
    }

    #[test]
    fn numbers_print_as_python_prints_them() {
        let cases = [
            (1.0, "1"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1e300, "1e+300"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
            (999999.5, "1e+06"),
            (2.5e-7, "2.5e-07"),
        ];
        for (x, text) in cases {
            assert_eq!(general(x), text, "{x}");
        }
        assert_eq!(
            (percent(0.02, 1), percent(0.01, 0), percent(f64::NAN, 0)),
            ("2.0%".into(), "1%".into(), "nan%".into())
        );
        assert_eq!(true_div(u64::MAX, 3), 6148914691236517205.0);
        assert_eq!(true_div((1 << 53) + 1, 1), 9007199254740992.0);
        assert_eq!(true_div((1 << 54) + 3, 2), 9007199254740994.0);
        assert!(
            at_least(10, 9.5)
                && at_least(10, 10.0)
                && !at_least(10, 10.000001)
                && !at_least(u64::MAX, 1.9e19)
        );
        assert!(
            at_least(u64::MAX, 18_446_744_073_709_549_568.0)
                && !at_least(0, f64::NAN)
                && at_least(0, -1.0)
        );
    }

    proptest! {
        /// Quantiles are never low and at most a quarter high (as the Python model's hypothesis test says).
        #[test]
        fn quantiles_are_at_most_a_quarter_high(
            mut values in proptest::collection::vec(0u64..1_000_000_000_000, 1..300),
            q in prop::sample::select(vec![0.5, 0.9, 0.99, 1.0]),
        ) {
            let histogram = durations(&values);
            values.sort_unstable();
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let reported = histogram.quantile(q).unwrap().unwrap();
            prop_assert!(exact <= reported && reported as f64 <= (exact as f64 * 1.25).max(exact as f64 + 1.0));
            prop_assert!(reported <= histogram.max_ns());
        }

        /// Merged histograms answer as one.
        #[test]
        fn merged_histograms_answer_as_one(
            values in proptest::collection::vec(any::<u64>(), 0..100), split in any::<usize>(),
        ) {
            let cut = split % (values.len() + 1);
            let mut first = durations(&values[..cut]);
            first.merge(&durations(&values[cut..]));
            prop_assert_eq!(first, durations(&values));
        }

        /// No input makes the figures or the verdict panic.
        #[test]
        fn no_panic_on_any_input(
            samples in proptest::collection::vec(any::<u64>(), 0..50), q in any::<f64>(),
            times in proptest::collection::vec(any::<u64>(), 4), frame_ns in any::<u64>(), timeout_ns in any::<u64>(),
            shares in proptest::collection::vec(any::<f64>(), 5), monitored in any::<bool>(),
        ) {
            let histogram = durations(&samples);
            let _ = histogram.quantile(q);
            let mut wire = EgressWire::new();
            wire.departed(times[0], times[1], times[2], times[3]);
            wire.stalled(times[0]);
            let thresholds = Thresholds {
                stall_share: shares[0], lag_p99_frames: shares[1], timer_p99_frames: shares[2],
                start_p99_frames: shares[3], timeout_p99_share: shares[4],
            };
            let figures = Figures { wire: &wire, lag: &histogram, timers: &histogram, starts: Some(&histogram),
                                    timeouts: Some(&histogram) };
            let _ = verdict(&figures, frame_ns, timeout_ns, &thresholds, monitored);
            let _ = general(q);
        }
    }
}
