//! DCQCN congestion control (Zhu et al., SIGCOMM 2015), sans-I/O.
//!
//! Of DCQCN's three parts the switch's is the MMU's ECN marking; this module has the two an RNIC plays:
//!
//! - the *notification point* ([`NotificationPoint`], receiving RNIC): a CE-marked packet of a QP makes it send
//!   a CNP to the QP's peer, at most once per CNP interval per QP;
//! - the *reaction point* ([`ReactionPoint`], sending RNIC, one per QP): a rate limiter and DCQCN's state
//!   machine. A CNP cuts the current rate by alpha/2 (the target takes the old rate) and raises alpha by g;
//!   alpha decays by (1 - g) every alpha period without a CNP. Increase events come from a timer and from a
//!   byte counter: in the first F of either the rate moves half way to the target (fast recovery), once both
//!   counters have passed F the target grows by R_HAI first (hyper increase), in between by R_AI (additive
//!   increase). Back at the line rate the limiter lets go and its timers stop until the next CNP.
//!
//! Time comes in as `now` (ns), rates are integer bit/s. Alpha is an `f64` computed in the same order of
//! operations as the Python model (same IEEE operations, same libm `pow`, ties-to-even rounding), so both give
//! the same rates bit for bit. The `--cc` text parsing and `check_link` (control plane: they run once, before a
//! fabric is built, and format messages with the units module) stay in Python.
use std::collections::HashMap;
use std::fmt;

/// A DCQCN time constant is at most a day (after dilation): longer is a typo, and it bounds the arithmetic.
pub const MAX_PERIOD_NS: u64 = 86_400 * 1_000_000_000;
/// The largest rate a DCQCN constant may be (10 Tbit/s).
pub const MAX_RATE_BPS: u64 = 10_000_000_000_000;

/// Bits in a byte, times ns in a second: a frame's serialization time is `size * this / rate`.
const NS_BITS_PER_BYTE: u128 = 8_000_000_000;

/// One field's range as the Python module's `_RANGES` gives it: name, bounds, and the bounds as `{:g}` prints
/// them (the message is the Python model's, word for word).
struct Range {
    field: &'static str,
    low: f64,
    high: f64,
    text: &'static str,
}

/// Every field's range, in the order the Python constructor checks them (the first failure is reported).
const RANGES: [Range; 10] = [
    Range {
        field: "cnp_interval_ns",
        low: 1.0,
        high: MAX_PERIOD_NS as f64,
        text: "1 to 8.64e+13",
    },
    Range {
        field: "alpha_period_ns",
        low: 1.0,
        high: MAX_PERIOD_NS as f64,
        text: "1 to 8.64e+13",
    },
    Range {
        field: "g",
        low: 1e-6,
        high: 1.0,
        text: "1e-06 to 1",
    },
    Range {
        field: "increase_period_ns",
        low: 1.0,
        high: MAX_PERIOD_NS as f64,
        text: "1 to 8.64e+13",
    },
    Range {
        field: "byte_counter",
        low: 1.0,
        high: (1u64 << 40) as f64,
        text: "1 to 1.09951e+12",
    },
    Range {
        field: "fast_recovery",
        low: 0.0,
        high: 1000.0,
        text: "0 to 1000",
    },
    Range {
        field: "rai_bps",
        low: 1.0,
        high: MAX_RATE_BPS as f64,
        text: "1 to 1e+13",
    },
    Range {
        field: "rhai_bps",
        low: 1.0,
        high: MAX_RATE_BPS as f64,
        text: "1 to 1e+13",
    },
    Range {
        field: "min_rate_bps",
        low: 1.0,
        high: MAX_RATE_BPS as f64,
        text: "1 to 1e+13",
    },
    Range {
        field: "reference_bps",
        low: 1.0,
        high: MAX_RATE_BPS as f64,
        text: "1 to 1e+13",
    },
];

/// The value a field was given, for the message that refuses it: an integer field's as written (also below 0
/// or past `u64`), or g's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FieldValue {
    /// An integer field's value.
    Int(i128),
    /// g's value.
    Float(f64),
}

impl FieldValue {
    /// Whether the value lies in `[low, high]` (the bounds of integer fields are exact integers in an `f64`).
    fn within(self, range: &Range) -> bool {
        match self {
            FieldValue::Int(v) => range.low as i128 <= v && v <= range.high as i128,
            FieldValue::Float(v) => range.low <= v && v <= range.high,
        }
    }
}

impl fmt::Display for FieldValue {
    /// As Python's `repr` prints it, for the messages (`2.0`, not `2`; `1e-07` as Python spells it aside).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Int(v) => write!(f, "{v}"),
            FieldValue::Float(v) => write!(f, "{v:?}"),
        }
    }
}

/// Why a set of DCQCN constants is refused.
#[derive(Clone, Debug, PartialEq)]
pub enum DcqcnError {
    /// A field outside its range (the constructor's `ValueError`).
    OutOfRange {
        field: &'static str,
        value: FieldValue,
        expected: &'static str,
    },
}

impl fmt::Display for DcqcnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DcqcnError::OutOfRange {
                field,
                value,
                expected,
            } => write!(f, "{field} {value}: expected {expected}"),
        }
    }
}

/// DCQCN's constants, by default the DCQCN authors' own (their ns-3 configuration, for 40 Gbit/s links).
///
/// `reference_bps` is the link rate the set was tuned for: a fabric given no modelled rate is taken to be that
/// fast for congestion control, since R_AI and R_HAI are absolute rates. Built only through [`DcqcnParams::new`]
/// or [`Default`], so every value is within its range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcqcnParams {
    /// The notification point's least time between two CNPs of one QP.
    pub cnp_interval_ns: u64,
    /// Alpha decays by (1 - g) once per this period without a CNP.
    pub alpha_period_ns: u64,
    /// Alpha's gain.
    pub g: f64,
    /// The rate-increase timer's period.
    pub increase_period_ns: u64,
    /// Bytes sent per byte-counter increase event.
    pub byte_counter: u64,
    /// F: the increase events of fast recovery.
    pub fast_recovery: u64,
    /// R_AI, the additive increase.
    pub rai_bps: u64,
    /// R_HAI, the hyper increase.
    pub rhai_bps: u64,
    /// The rate a CNP never cuts below.
    pub min_rate_bps: u64,
    /// The link rate the set was tuned for.
    pub reference_bps: u64,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            cnp_interval_ns: 50_000,
            alpha_period_ns: 55_000,
            g: 1.0 / 256.0,
            increase_period_ns: 55_000,
            byte_counter: 10_000_000,
            fast_recovery: 5,
            rai_bps: 40_000_000,
            rhai_bps: 200_000_000,
            min_rate_bps: 1_000_000,
            reference_bps: 40_000_000_000,
        }
    }
}

/// The fields of [`DcqcnParams`] as given, before their ranges are checked (integers as `i128`, so that a
/// negative or huge value is refused by range rather than lost in a conversion).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcqcnFields {
    pub cnp_interval_ns: i128,
    pub alpha_period_ns: i128,
    pub g: f64,
    pub increase_period_ns: i128,
    pub byte_counter: i128,
    pub fast_recovery: i128,
    pub rai_bps: i128,
    pub rhai_bps: i128,
    pub min_rate_bps: i128,
    pub reference_bps: i128,
}

impl From<DcqcnParams> for DcqcnFields {
    fn from(p: DcqcnParams) -> Self {
        DcqcnFields {
            cnp_interval_ns: p.cnp_interval_ns.into(),
            alpha_period_ns: p.alpha_period_ns.into(),
            g: p.g,
            increase_period_ns: p.increase_period_ns.into(),
            byte_counter: p.byte_counter.into(),
            fast_recovery: p.fast_recovery.into(),
            rai_bps: p.rai_bps.into(),
            rhai_bps: p.rhai_bps.into(),
            min_rate_bps: p.min_rate_bps.into(),
            reference_bps: p.reference_bps.into(),
        }
    }
}

/// An integer field already checked to lie in its range (at most 10^13 < 2^64).
fn checked_int(value: i128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

impl DcqcnParams {
    /// The constants of `fields`, or the first field (in the Python model's order) outside its range.
    pub fn new(fields: DcqcnFields) -> Result<Self, DcqcnError> {
        let values = [
            FieldValue::Int(fields.cnp_interval_ns),
            FieldValue::Int(fields.alpha_period_ns),
            FieldValue::Float(fields.g),
            FieldValue::Int(fields.increase_period_ns),
            FieldValue::Int(fields.byte_counter),
            FieldValue::Int(fields.fast_recovery),
            FieldValue::Int(fields.rai_bps),
            FieldValue::Int(fields.rhai_bps),
            FieldValue::Int(fields.min_rate_bps),
            FieldValue::Int(fields.reference_bps),
        ];
        for (value, range) in values.into_iter().zip(RANGES.iter()) {
            if !value.within(range) {
                return Err(DcqcnError::OutOfRange {
                    field: range.field,
                    value,
                    expected: range.text,
                });
            }
        }
        Ok(DcqcnParams {
            cnp_interval_ns: checked_int(fields.cnp_interval_ns),
            alpha_period_ns: checked_int(fields.alpha_period_ns),
            g: fields.g,
            increase_period_ns: checked_int(fields.increase_period_ns),
            byte_counter: checked_int(fields.byte_counter),
            fast_recovery: checked_int(fields.fast_recovery),
            rai_bps: checked_int(fields.rai_bps),
            rhai_bps: checked_int(fields.rhai_bps),
            min_rate_bps: checked_int(fields.min_rate_bps),
            reference_bps: checked_int(fields.reference_bps),
        })
    }
}

/// Python's `round(x)` of a finite float: to the nearest integer, ties to even (saturating past `i128`).
fn round_half_even(x: f64) -> i128 {
    x.round_ties_even() as i128
}

/// The receiving RNIC's side: whether a CE-marked packet of a QP earns its peer a CNP now.
///
/// A map by QPN rather than a vector: QPNs are 24-bit numbers the peer chose, few of them live at once.
#[derive(Clone, Debug)]
pub struct NotificationPoint {
    interval_ns: u64,
    last: HashMap<u64, u64>,
    ce_received: u64,
    cnps: u64,
}

impl NotificationPoint {
    /// A notification point sending at most one CNP per `interval_ns` per QP.
    pub fn new(interval_ns: u64) -> Self {
        NotificationPoint {
            interval_ns,
            last: HashMap::new(),
            ce_received: 0,
            cnps: 0,
        }
    }

    /// The least time between two CNPs of one QP.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// CE-marked packets seen.
    pub fn ce_received(&self) -> u64 {
        self.ce_received
    }

    /// CNPs decided.
    pub fn cnps(&self) -> u64 {
        self.cnps
    }

    /// A CE-marked packet arrived for QP `qpn` at `now`: true if a CNP is to be sent for it.
    ///
    /// A `now` before the QP's last CNP (a caller's clock going back) sends none, as the Python model.
    pub fn on_ce(&mut self, now: u64, qpn: u64) -> bool {
        self.ce_received += 1;
        if let Some(&last) = self.last.get(&qpn) {
            if now < last || now - last < self.interval_ns {
                return false;
            }
        }
        self.last.insert(qpn, now);
        self.cnps += 1;
        true
    }

    /// The QP is gone: its next CE-marked packet (as a new QP's) earns a CNP at once.
    pub fn forget(&mut self, qpn: u64) {
        self.last.remove(&qpn);
    }
}

/// A reaction point's event counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpCounters {
    /// CNPs received.
    pub cnps: u64,
    /// Rate cuts (one per CNP).
    pub decreases: u64,
    /// Increase events, timer and byte counter.
    pub increases: u64,
    /// Times the limiter let go at the line rate.
    pub released: u64,
}

/// The sending RNIC's side for one QP: its current and target rate, alpha, and the pacing of its frames.
#[derive(Clone, Debug)]
pub struct ReactionPoint {
    params: DcqcnParams,
    line_bps: u64,
    rate_bps: u64,
    target_bps: u64,
    alpha: f64,
    limited: bool,
    timer_events: u64,
    byte_events: u64,
    bytes: u64,
    alpha_since: Option<u64>,
    alpha_deadline: Option<u64>,
    increase_deadline: Option<u64>,
    ready_at: u64,
    counters: RpCounters,
}

impl ReactionPoint {
    /// A QP at the line rate, not limited, alpha 1.
    pub fn new(params: DcqcnParams, line_rate_bps: u64) -> Self {
        ReactionPoint {
            params,
            line_bps: line_rate_bps,
            rate_bps: line_rate_bps,
            target_bps: line_rate_bps,
            alpha: 1.0,
            limited: false,
            timer_events: 0,
            byte_events: 0,
            bytes: 0,
            alpha_since: None,
            alpha_deadline: None,
            increase_deadline: None,
            ready_at: 0,
            counters: RpCounters::default(),
        }
    }

    /// The constants this QP runs.
    pub fn params(&self) -> &DcqcnParams {
        &self.params
    }

    /// The link's rate, the most the QP is ever given.
    pub fn line_bps(&self) -> u64 {
        self.line_bps
    }

    /// RC, the current rate.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// RT, the target rate.
    pub fn target_bps(&self) -> u64 {
        self.target_bps
    }

    /// Alpha, the congestion estimate.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Whether the limiter holds the QP below the line rate.
    pub fn limited(&self) -> bool {
        self.limited
    }

    /// T: timer increase events since the last CNP.
    pub fn timer_events(&self) -> u64 {
        self.timer_events
    }

    /// BC: byte-counter increase events since the last CNP.
    pub fn byte_events(&self) -> u64 {
        self.byte_events
    }

    /// When alpha last changed (it decays while the limiter is off too), if it ever did.
    pub fn alpha_since(&self) -> Option<u64> {
        self.alpha_since
    }

    /// The alpha timer's next expiry, while limited.
    pub fn alpha_deadline(&self) -> Option<u64> {
        self.alpha_deadline
    }

    /// The increase timer's next expiry, while limited.
    pub fn increase_deadline(&self) -> Option<u64> {
        self.increase_deadline
    }

    /// The earliest time the next frame may leave (pacing at RC).
    pub fn ready_at(&self) -> u64 {
        self.ready_at
    }

    /// The event counts.
    pub fn counters(&self) -> RpCounters {
        self.counters
    }

    /// A CNP for this QP: cut the rate, raise alpha, start the increase stages over.
    pub fn on_cnp(&mut self, now: u64) {
        let p = self.params;
        self.counters.cnps += 1;
        self.counters.decreases += 1;
        if let (false, Some(since)) = (self.limited, self.alpha_since) {
            // the periods without a CNP since the release (floor division, as Python's, for any order)
            let periods =
                (i128::from(now) - i128::from(since)).div_euclid(i128::from(p.alpha_period_ns));
            self.alpha *= (1.0 - p.g).powf(periods as f64);
        }
        self.target_bps = self.rate_bps;
        let cut = round_half_even(self.rate_bps as f64 * (1.0 - self.alpha / 2.0));
        self.rate_bps = checked_int(cut.max(i128::from(p.min_rate_bps)));
        self.alpha = (1.0 - p.g) * self.alpha + p.g;
        self.alpha_since = Some(now);
        self.timer_events = 0;
        self.byte_events = 0;
        self.bytes = 0;
        self.alpha_deadline = Some(now.saturating_add(p.alpha_period_ns));
        self.increase_deadline = Some(now.saturating_add(p.increase_period_ns));
        self.limited = true;
    }

    /// Whether a frame of this QP may leave at `now`.
    pub fn may_send(&self, now: u64) -> bool {
        !self.limited || now >= self.ready_at
    }

    /// A frame of `size` bytes of this QP left at `now`: the pacer and the byte counter move.
    pub fn on_sent(&mut self, now: u64, size: u64) {
        if !self.limited {
            return;
        }
        let start = now.max(self.ready_at);
        let wire_ns = u128::from(size) * NS_BITS_PER_BYTE / u128::from(self.rate_bps.max(1));
        self.ready_at = start.saturating_add(u64::try_from(wire_ns).unwrap_or(u64::MAX));
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes >= self.params.byte_counter {
            self.bytes -= self.params.byte_counter;
            self.increase();
            self.byte_events += 1;
        }
    }

    /// The earliest of the two timers while limited; none once released.
    pub fn next_deadline(&self) -> Option<u64> {
        if !self.limited {
            return None;
        }
        match (self.alpha_deadline, self.increase_deadline) {
            (Some(a), Some(i)) => Some(a.min(i)),
            (a, i) => a.or(i),
        }
    }

    /// Serve the alpha and rate-increase timers due by `now`, each period it missed too (one by one: the
    /// float products must be the Python model's).
    ///
    /// A timer whose next expiry would pass `u64::MAX` ns (584 years) stops.
    pub fn on_timer(&mut self, now: u64) {
        let p = self.params;
        while let (true, Some(deadline)) = (self.limited, self.alpha_deadline) {
            if deadline > now {
                break;
            }
            self.alpha *= 1.0 - p.g;
            self.alpha_since = Some(deadline);
            self.alpha_deadline = deadline.checked_add(p.alpha_period_ns);
        }
        while let (true, Some(deadline)) = (self.limited, self.increase_deadline) {
            if deadline > now {
                break;
            }
            self.increase_deadline = deadline.checked_add(p.increase_period_ns);
            self.increase();
            self.timer_events += 1;
        }
    }

    /// One increase event; T and BC count the events before it, so the first F of each are fast recovery.
    fn increase(&mut self) {
        let p = self.params;
        let (t, bc) = (self.timer_events, self.byte_events);
        if t.max(bc) >= p.fast_recovery {
            let step = if t.min(bc) > p.fast_recovery {
                p.rhai_bps
            } else {
                p.rai_bps
            };
            self.target_bps = self.target_bps.saturating_add(step).min(self.line_bps);
        }
        let halfway = (u128::from(self.target_bps) + u128::from(self.rate_bps)).div_ceil(2);
        self.rate_bps = u64::try_from(halfway)
            .unwrap_or(u64::MAX)
            .min(self.line_bps);
        self.counters.increases += 1;
        if self.rate_bps >= self.line_bps {
            self.limited = false;
            self.alpha_deadline = None;
            self.increase_deadline = None;
            self.counters.released += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LINE: u64 = 40_000_000_000;
    const US: u64 = 1000;

    #[test]
    fn cnp_at_most_once_per_interval_per_qp() {
        let mut np = NotificationPoint::new(50 * US);
        assert!(np.on_ce(0, 0x11));
        assert!(!np.on_ce(49_999, 0x11));
        assert!(np.on_ce(10, 0x12));
        assert!(np.on_ce(50 * US, 0x11));
        assert!(!np.on_ce(60 * US, 0x11));
        assert_eq!((np.ce_received(), np.cnps()), (5, 3));
        np.forget(0x11);
        assert!(np.on_ce(61 * US, 0x11));
    }

    #[test]
    fn first_cnp_halves_the_rate() {
        let mut rp = ReactionPoint::new(DcqcnParams::default(), LINE);
        assert!(!rp.limited() && rp.next_deadline().is_none() && rp.may_send(0));
        rp.on_cnp(1000);
        assert_eq!((rp.rate_bps(), rp.target_bps()), (LINE / 2, LINE));
        assert_eq!(rp.next_deadline(), Some(1000 + 55 * US));
    }

    #[test]
    fn fast_recovery_halves_the_gap() {
        let p = DcqcnParams {
            byte_counter: 1 << 40,
            ..DcqcnParams::default()
        };
        let mut rp = ReactionPoint::new(p, LINE);
        rp.on_cnp(0);
        let mut rate = LINE / 2;
        for k in 1..=5 {
            rp.on_timer(k * 55 * US);
            rate = (LINE + rate).div_ceil(2);
            assert_eq!((rp.rate_bps(), rp.target_bps()), (rate, LINE));
        }
        assert_eq!(rp.counters().increases, 5);
    }

    #[test]
    fn pacing_follows_the_current_rate() {
        let mut rp = ReactionPoint::new(DcqcnParams::default(), 1_000_000_000);
        rp.on_cnp(0);
        rp.on_sent(100, 1000);
        assert_eq!(rp.ready_at(), 100 + 16_000);
        assert!(!rp.may_send(16_099) && rp.may_send(16_100));
    }

    #[test]
    fn the_limiter_lets_go_at_the_line_rate() {
        let p = DcqcnParams {
            g: 1.0 / 16.0,
            fast_recovery: 1000,
            ..DcqcnParams::default()
        };
        let mut rp = ReactionPoint::new(p, 1_000_000);
        rp.on_cnp(0);
        let mut t = 0;
        while rp.limited() {
            t += 55 * US;
            rp.on_timer(t);
            assert!(t < 1_000_000_000);
        }
        assert_eq!((rp.rate_bps(), rp.counters().released), (1_000_000, 1));
    }

    #[test]
    fn ranges_refuse_in_the_python_order() {
        let fields = DcqcnFields {
            g: 2.0,
            fast_recovery: -1,
            ..DcqcnParams::default().into()
        };
        let err = DcqcnParams::new(fields).unwrap_err();
        assert_eq!(err.to_string(), "g 2.0: expected 1e-06 to 1");
    }

    proptest! {
        /// Any sequence of events at any times: no panic, the rate stays within [min, line] once cut.
        #[test]
        fn no_panic_and_rate_in_bounds(line in 1u64..=u64::MAX, events in proptest::collection::vec((0u8..3, any::<u64>(), any::<u64>()), 0..60)) {
            let p = DcqcnParams { alpha_period_ns: 1 << 40, increase_period_ns: 1 << 40, ..DcqcnParams::default() };
            let mut rp = ReactionPoint::new(p, line);
            for (kind, now, size) in events {
                match kind {
                    0 => rp.on_cnp(now),
                    1 => rp.on_sent(now, size),
                    _ => rp.on_timer(now.min(1 << 44)),
                }
                prop_assert!(rp.rate_bps() <= line.max(p.min_rate_bps));
            }
        }
    }
}
