//! A PFC watchdog with SONiC pfcwd's semantics, sans-I/O.
//!
//! A lossless egress queue is *stormed* when it has been paused without a break for the detection time while
//! it held frames and sent none (a NIC that stopped receiving and pauses its switch port without end, or a
//! cycle of buffer dependencies: a deadlock). The action then:
//!
//! - [`Action::Drop`]: the queue is flushed, its new arrivals are dropped and the PFC frames received for it
//!   are ignored (SONiC's default);
//! - [`Action::Forward`]: the PFC frames received for it are ignored, so it sends;
//! - [`Action::Alert`]: nothing but the count.
//!
//! The storm ends (*restoration*) once no PFC pause frame has arrived for the queue for the restoration time.
//! The switch's MMU (`model::mmu`) tells the watchdog when a queue is paused with frames, makes progress or
//! gets a pause frame, and acts on what [`Watchdog::on_timer`] returns. Times are the emulator's, as written
//! (an operator's timers, not the fabric's physics: they are not scaled by a modelled rate's dilation).
use std::fmt;

/// The longest detection or restoration time an operator may set: an hour.
pub const MAX_TIME_NS: u64 = 3600 * 1_000_000_000;
/// SONiC's `start_default` detection time; its restoration time is twice that.
pub const SONIC_DETECTION_NS: u64 = 200_000_000;

/// What the watchdog does to a stormed queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Flush the queue, drop its arrivals, ignore its PFC (SONiC's default).
    Drop,
    /// Ignore its PFC, so it sends.
    Forward,
    /// Only count the storm.
    Alert,
}

impl Action {
    /// Every action, in the order the `--switch pfcwd=` help and messages list them.
    pub const ALL: [Action; 3] = [Action::Drop, Action::Forward, Action::Alert];

    /// The action's name in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Action::Drop => "drop",
            Action::Forward => "forward",
            Action::Alert => "alert",
        }
    }

    /// The action named `name`, if any.
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|action| action.name() == name)
    }
}

/// A detection or restoration time outside 1 ns to [`MAX_TIME_NS`]: the field's name and the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeOutOfRange {
    /// `detection_ns` or `restoration_ns`.
    pub field: &'static str,
    /// The refused value.
    pub value: u64,
}

impl TimeOutOfRange {
    /// The message's tail after the field and its value ([`MAX_TIME_NS`] as `format_time` writes it), for
    /// callers that show the value themselves.
    pub const EXPECTED: &'static str = "expected 1 ns to 3600 s";
}

impl fmt::Display for TimeOutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.field, self.value, Self::EXPECTED)
    }
}

/// `value` if it is a valid detection or restoration time (1 ns to [`MAX_TIME_NS`]), named `field` otherwise.
pub fn check_time(field: &'static str, value: u64) -> Result<u64, TimeOutOfRange> {
    if (1..=MAX_TIME_NS).contains(&value) {
        Ok(value)
    } else {
        Err(TimeOutOfRange { field, value })
    }
}

/// Detection and restoration time (ns) and the action on a storm; only valid ones exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatchdogConfig {
    detection_ns: u64,
    restoration_ns: u64,
    action: Action,
}

impl WatchdogConfig {
    /// A config whose times are each 1 ns to [`MAX_TIME_NS`]; the first one out of range otherwise.
    pub fn new(
        detection_ns: u64,
        restoration_ns: u64,
        action: Action,
    ) -> Result<WatchdogConfig, TimeOutOfRange> {
        Ok(WatchdogConfig {
            detection_ns: check_time("detection_ns", detection_ns)?,
            restoration_ns: check_time("restoration_ns", restoration_ns)?,
            action,
        })
    }

    /// `pfcwd=on`: SONiC's defaults (detection 200 ms, restoration twice that, drop).
    pub fn sonic_default() -> WatchdogConfig {
        WatchdogConfig {
            detection_ns: SONIC_DETECTION_NS,
            restoration_ns: 2 * SONIC_DETECTION_NS,
            action: Action::Drop,
        }
    }

    /// How long a queue stays paused with frames before it is stormed.
    pub fn detection_ns(&self) -> u64 {
        self.detection_ns
    }

    /// How long a storm lasts after the queue's last PFC pause frame.
    pub fn restoration_ns(&self) -> u64 {
        self.restoration_ns
    }

    /// What a storm does to its queue.
    pub fn action(&self) -> Action {
        self.action
    }
}

/// `--switch pfcwd=TEXT` split by its grammar, times still as text (the caller's unit parser reads them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PfcwdSpec<'a> {
    /// `off`: no watchdog.
    Off,
    /// `on`: [`WatchdogConfig::sonic_default`].
    On,
    /// `DETECTION[:RESTORATION[:ACTION]]`, each part stripped and non-empty.
    Times {
        detection: &'a str,
        restoration: Option<&'a str>,
        action: Option<&'a str>,
    },
}

/// The shape `--switch pfcwd=` expects, for the message when a text has another.
pub const PFCWD_SYNTAX: &str =
    "expected off, on or DETECTION[:RESTORATION[:ACTION]], e.g. 200ms:400ms:drop";

/// `text` split as `off`, `on` or up to three `:`-separated non-empty parts; `None` for any other shape.
///
/// Whitespace is stripped as Python's `str.strip` does (which also counts the ASCII separators 0x1C to
/// 0x1F), so the same texts are accepted as by the Python parser.
pub fn split_pfcwd(text: &str) -> Option<PfcwdSpec<'_>> {
    let text = python_strip(text);
    match text {
        "off" => return Some(PfcwdSpec::Off),
        "on" => return Some(PfcwdSpec::On),
        _ => {}
    }
    let mut parts = text.split(':').map(python_strip);
    let detection = parts.next().filter(|part| !part.is_empty())?;
    let restoration = parts.next();
    let action = parts.next();
    if parts.next().is_some() || restoration == Some("") || action == Some("") {
        return None;
    }
    Some(PfcwdSpec::Times {
        detection,
        restoration,
        action,
    })
}

/// `text` without the leading and trailing characters Python's `str.strip()` removes.
fn python_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// An egress queue: (egress port, priority). Ordered as the Python model's tuples, port first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    pub port: usize,
    pub priority: usize,
}

/// The storms of one switch's lossless egress queues.
///
/// Few queues are ever stalled or stormed at once, so each set is a vector kept sorted by key: lookups are a
/// binary search (free when it is empty, the common case on the per-frame path), and [`Watchdog::on_timer`]
/// hands its queues out in key order as the Python model's `sorted` does.
#[derive(Clone, Debug)]
pub struct Watchdog {
    config: WatchdogConfig,
    /// Queue -> since when it has been paused with frames and sent none.
    stalled: Vec<(QueueKey, u64)>,
    /// Queue in a storm -> when its last PFC pause frame came.
    stormed: Vec<(QueueKey, u64)>,
    /// Storms detected so far.
    pub storms: u64,
    /// Storms ended so far.
    pub restorations: u64,
}

impl Watchdog {
    /// A watchdog with no queue stalled or stormed.
    pub fn new(config: WatchdogConfig) -> Watchdog {
        Watchdog {
            config,
            stalled: Vec::new(),
            stormed: Vec::new(),
            storms: 0,
            restorations: 0,
        }
    }

    /// The times and action it watches with.
    pub fn config(&self) -> &WatchdogConfig {
        &self.config
    }

    /// Whether `key` is in a storm whose action takes PFC away from it (drop or forward).
    pub fn stormed(&self, key: QueueKey) -> bool {
        self.config.action != Action::Alert && find(&self.stormed, key).is_ok()
    }

    /// Whether `key`'s arrivals are dropped (a storm under [`Action::Drop`]).
    pub fn dropping(&self, key: QueueKey) -> bool {
        self.config.action == Action::Drop && find(&self.stormed, key).is_ok()
    }

    /// `key` is paused and holds frames (a pause came with frames queued, or a frame came while paused);
    /// whether its detection time started now.
    pub fn stalled(&mut self, now: u64, key: QueueKey) -> bool {
        if find(&self.stormed, key).is_ok() {
            return false;
        }
        match find(&self.stalled, key) {
            Ok(_) => false,
            Err(at) => {
                self.stalled.insert(at, (key, now));
                true
            }
        }
    }

    /// `key` sent a frame, or its pause ended: not stalled; whether it was.
    pub fn progressed(&mut self, key: QueueKey) -> bool {
        match find(&self.stalled, key) {
            Ok(at) => {
                self.stalled.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// A PFC frame pausing `key` arrived: a storm's restoration starts over.
    pub fn pause_received(&mut self, now: u64, key: QueueKey) {
        if let Ok(at) = find(&self.stormed, key) {
            self.stormed[at].1 = now;
        }
    }

    /// When [`Watchdog::on_timer`] has something to do: the first detection or restoration due.
    pub fn next_deadline(&self) -> Option<u64> {
        let detections = self
            .stalled
            .iter()
            .map(|&(_, since)| since.saturating_add(self.config.detection_ns));
        let restorations = self
            .stormed
            .iter()
            .map(|&(_, last)| last.saturating_add(self.config.restoration_ns));
        detections.chain(restorations).min()
    }

    /// The queues whose storm was detected by `now`, and those restored, each in key order.
    pub fn on_timer(&mut self, now: u64) -> (Vec<QueueKey>, Vec<QueueKey>) {
        let detection_ns = self.config.detection_ns;
        let restoration_ns = self.config.restoration_ns;
        let mut detected = Vec::new();
        self.stalled.retain(|&(key, since)| {
            let due = since.saturating_add(detection_ns) <= now;
            if due {
                detected.push(key);
            }
            !due
        });
        for &key in &detected {
            if let Err(at) = find(&self.stormed, key) {
                self.stormed.insert(at, (key, now));
            }
        }
        self.storms += detected.len() as u64;
        let mut restored = Vec::new();
        self.stormed.retain(|&(key, last)| {
            let due = last.saturating_add(restoration_ns) <= now;
            if due {
                restored.push(key);
            }
            !due
        });
        self.restorations += restored.len() as u64;
        (detected, restored)
    }
}

/// Where `key` is in a sorted set of queues, or where it would go.
fn find(set: &[(QueueKey, u64)], key: QueueKey) -> Result<usize, usize> {
    set.binary_search_by_key(&key, |&(queued, _)| queued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const KEY: QueueKey = QueueKey {
        port: 1,
        priority: 3,
    };

    fn config(detection_ns: u64, restoration_ns: u64, action: Action) -> WatchdogConfig {
        WatchdogConfig::new(detection_ns, restoration_ns, action).expect("a valid test config")
    }

    #[test]
    fn stormed_after_detection_then_restored_after_the_last_pause() {
        let mut wd = Watchdog::new(config(100 * MS, 300 * MS, Action::Drop));
        assert!(wd.stalled(10 * MS, KEY) && !wd.stalled(20 * MS, KEY));
        assert_eq!(wd.next_deadline(), Some(110 * MS));
        assert_eq!(wd.on_timer(109 * MS), (vec![], vec![]));
        assert_eq!(wd.on_timer(110 * MS), (vec![KEY], vec![]));
        assert!(wd.stormed(KEY) && wd.dropping(KEY) && wd.storms == 1);
        assert!(!wd.stalled(120 * MS, KEY));
        wd.pause_received(200 * MS, KEY);
        assert_eq!(wd.next_deadline(), Some(500 * MS));
        assert_eq!(wd.on_timer(500 * MS), (vec![], vec![KEY]));
        assert!(!wd.stormed(KEY) && wd.restorations == 1 && wd.next_deadline().is_none());
    }

    #[test]
    fn actions_decide_stormed_and_dropping() {
        for (action, stormed, dropping) in [
            (Action::Drop, true, true),
            (Action::Forward, true, false),
            (Action::Alert, false, false),
        ] {
            let mut wd = Watchdog::new(config(1, 1, action));
            wd.stalled(0, KEY);
            wd.on_timer(1);
            assert_eq!(
                (wd.stormed(KEY), wd.dropping(KEY), wd.storms),
                (stormed, dropping, 1)
            );
        }
    }

    #[test]
    fn times_out_of_range_are_refused_with_their_field() {
        let err = WatchdogConfig::new(0, 5, Action::Drop).unwrap_err();
        assert_eq!(err.to_string(), "detection_ns 0: expected 1 ns to 3600 s");
        let err = WatchdogConfig::new(5, MAX_TIME_NS + 1, Action::Drop).unwrap_err();
        assert_eq!(err.field, "restoration_ns");
        assert!(WatchdogConfig::new(MAX_TIME_NS, 1, Action::Alert).is_ok());
    }

    #[test]
    fn pfcwd_texts_split_by_their_grammar() {
        assert_eq!(split_pfcwd(" off "), Some(PfcwdSpec::Off));
        assert_eq!(split_pfcwd("on"), Some(PfcwdSpec::On));
        assert_eq!(
            split_pfcwd("50ms : 1s:forward"),
            Some(PfcwdSpec::Times {
                detection: "50ms",
                restoration: Some("1s"),
                action: Some("forward")
            })
        );
        assert_eq!(split_pfcwd("50ms::drop"), None);
        assert_eq!(split_pfcwd("1:2:3:4"), None);
        assert_eq!(split_pfcwd(""), None);
        assert_eq!(split_pfcwd("\u{1c}on\u{1f}"), Some(PfcwdSpec::On));
    }

    proptest! {
        #[test]
        fn no_panic_on_any_pfcwd_text(text in ".*") {
            let _ = split_pfcwd(&text);
        }

        /// The sorted sets behave as the Python model's dicts: a queue is stalled or stormed, never both,
        /// and the keys come out of on_timer sorted.
        #[test]
        fn a_queue_is_never_both_stalled_and_stormed(
            steps in proptest::collection::vec((0u8..4, 0usize..3, 0usize..8, 0u64..50), 0..200),
        ) {
            let mut wd = Watchdog::new(config(7, 11, Action::Forward));
            let mut now = 0;
            for (op, port, priority, dt) in steps {
                now += dt;
                let key = QueueKey { port, priority };
                match op {
                    0 => { wd.stalled(now, key); }
                    1 => { wd.progressed(key); }
                    2 => wd.pause_received(now, key),
                    _ => {
                        let (detected, restored) = wd.on_timer(now);
                        prop_assert!(detected.windows(2).all(|w| w[0] < w[1]));
                        prop_assert!(restored.windows(2).all(|w| w[0] < w[1]));
                    }
                }
                for &(key, _) in &wd.stalled {
                    prop_assert!(find(&wd.stormed, key).is_err());
                }
                prop_assert!(wd.stalled.windows(2).all(|w| w[0].0 < w[1].0));
                prop_assert!(wd.stormed.windows(2).all(|w| w[0].0 < w[1].0));
            }
        }
    }
}
