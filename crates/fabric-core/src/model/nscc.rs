//! NSCC, UET's sender-side congestion control: a window in bytes moved by ECN and delay, sans-I/O.
//!
//! Every ACK brings two signals: whether the packet it names was CE-marked, and (for a packet sent once) its
//! round trip, whose excess over the base RTT is queueing delay. NSCC reads the pair in four ways (the UET 1.0
//! overview, arXiv 2508.08906; the constants and the order of the steps are uet-htsim's, `UecSrc` in
//! `htsim/sim/uec.cpp`, read and re-derived here, not copied):
//!
//! | ECN | delay vs target | reading | window |
//! |---|---|---|---|
//! | no | below | spare capacity | proportional increase (`alpha x (target - delay)` per byte), or fast increase near zero delay |
//! | no | above | a queue that is not ours to fix | fair increase (`fi` per byte) |
//! | yes | above | our queue | multiplicative decrease, at most once per base RTT, by the averaged delay |
//! | yes | below | a queue that is draining | hold (the path changes: `model::spray`) |
//!
//! Increases accumulate and are applied once per 8 packets or network RTT (divided by the window, so a flow
//! gains per RTT what `fi` and `alpha` say, whatever its window), plus `eta` per RTT. Quick adapt: when a
//! trim, or a delay of four targets, shows the window far above what the last RTT delivered, the window drops
//! to what was delivered at once. A NACK (a trim) takes its packet's bytes off the window, a timeout too.
//!
//! The constants scale with the path: `a` is the path's bandwidth-delay product over uet-htsim's reference
//! (100 Gbit/s x 12 us), `b` the target over the reference's 12 us, so one parameter set serves a 100 Gbit/s
//! fabric and an emulated 50 Mbit/s one alike. Times are ns, windows bytes.
/// uet-htsim's reference path: 100 Gbit/s and 12 us, a BDP of 150,000 bytes.
const REF_BDP: f64 = 150_000.0;
const REF_RTT_NS: f64 = 12_000.0;
/// The average delay's EWMA weight.
const DELAY_WEIGHT: f64 = 0.0125;
/// Quick adapt acts only while the window delivered less than `max_window >> QA_GATE`.
const QA_GATE: u32 = 3;
/// Delay below which increases are fast (ns).
const FAST_DELAY_NS: u64 = 1_000;

/// NSCC's settings for one path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NsccParams {
    /// The round trip of the empty path (ns): the base RTT it starts from and the adjustment period.
    pub network_rtt_ns: u64,
    /// The sender's link rate (bit/s): with the RTT, the bandwidth-delay product.
    pub rate_bps: u64,
    /// The queueing delay it aims at (ns).
    pub target_delay_ns: u64,
    /// Multiplicative decrease: the share of the averaged delay over the target cut per decrease (at most
    /// half the window).
    pub gamma: f64,
}

impl NsccParams {
    /// uet-htsim's defaults for a path of `network_rtt_ns` at `rate_bps`: the target is 0.75 of the network
    /// RTT on a trimming fabric (the whole RTT otherwise), gamma 0.8.
    pub fn for_path(network_rtt_ns: u64, rate_bps: u64, trimming: bool) -> NsccParams {
        let share = if trimming { 0.75 } else { 1.0 };
        NsccParams {
            network_rtt_ns,
            rate_bps,
            target_delay_ns: ((network_rtt_ns as f64 * share) as u64).max(1),
            gamma: 0.8,
        }
    }

    /// The bandwidth-delay product of `rtt_ns` at the rate, in bytes.
    fn bdp(&self, rtt_ns: u64) -> f64 {
        self.rate_bps as f64 * rtt_ns as f64 / 8e9
    }
}

/// What moved the window, for the statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NsccCounters {
    pub proportional_increases: u64,
    pub fair_increases: u64,
    pub fast_increases: u64,
    pub decreases: u64,
    pub holds: u64,
    pub quick_adapts: u64,
    pub nacks: u64,
    pub timeouts: u64,
}

/// One connection's window.
#[derive(Clone, Debug)]
pub struct Nscc {
    params: NsccParams,
    mss: f64,
    // the constants, from the path
    alpha: f64,
    fair: f64,
    eta: f64,
    fast_scale: f64,
    // the window and its bounds
    window: f64,
    max_window: f64,
    base_rtt: u64,
    avg_delay: f64,
    // increases waiting to be applied
    pending: f64,
    received: u64,
    last_adjust: u64,
    last_decrease: Option<u64>,
    // fast increase
    fast_bytes: u64,
    fast: bool,
    // quick adapt
    achieved: u64,
    qa_end: u64,
    qa_armed: bool,
    ignore: u64,
    ignored: u64,
    pub counters: NsccCounters,
}

impl Nscc {
    /// A window for packets of `mss` bytes (the floor), starting at its largest: 1.5 bandwidth-delay products.
    pub fn new(params: NsccParams, mss: u32) -> Nscc {
        let mss = f64::from(mss.max(1));
        let bdp = params.bdp(params.network_rtt_ns).max(mss);
        let a = bdp / REF_BDP;
        let b = params.target_delay_ns as f64 / REF_RTT_NS;
        let max_window = (1.5 * bdp).max(mss);
        Nscc {
            params,
            mss,
            alpha: 4.0 * mss * a * b / params.target_delay_ns.max(1) as f64,
            fair: 5.0 * mss * a,
            eta: 0.15 * mss * a,
            fast_scale: 0.25 * a,
            window: max_window,
            max_window,
            base_rtt: params.network_rtt_ns,
            avg_delay: 0.0,
            pending: 0.0,
            received: 0,
            last_adjust: 0,
            last_decrease: None,
            fast_bytes: 0,
            fast: false,
            achieved: 0,
            qa_end: 0,
            qa_armed: false,
            ignore: 0,
            ignored: 0,
            counters: NsccCounters::default(),
        }
    }

    /// The window in bytes.
    pub fn window(&self) -> u64 {
        self.window as u64
    }

    /// An ACK at `now` took `acked` bytes out of flight (with `in_flight` bytes still out); `rtt` is the round
    /// trip of the packet it names if that one was sent once, `ecn` whether it was marked.
    pub fn on_ack(&mut self, now: u64, acked: u64, in_flight: u64, rtt: Option<u64>, ecn: bool) {
        self.achieved += acked;
        self.received += acked;
        self.ignored += acked;
        let delay = match rtt {
            Some(rtt) => {
                // A shorter round trip lowers the base the delay counts from; unlike uet-htsim's, the largest
                // window stays the network RTT's: a packet is in flight here from the sender's NIC queue on
                // (uet_transport counts that queue in the network RTT), which the first packets skip.
                self.base_rtt = self.base_rtt.min(rtt);
                let delay = rtt - self.base_rtt;
                self.average(delay, ecn);
                delay
            }
            None => self.avg_delay as u64,
        };
        if self.quick_adapt(now, false, ecn, delay, in_flight) {
            return;
        }
        let target = self.params.target_delay_ns;
        match (ecn, delay >= target) {
            (false, true) => {
                self.pending += self.fair * acked as f64;
                self.counters.fair_increases += 1;
            }
            (false, false) => {
                if self.fast_increase(acked, delay) {
                    self.counters.fast_increases += 1;
                } else {
                    self.pending += self.alpha * acked as f64 * (target - delay) as f64;
                    self.counters.proportional_increases += 1;
                }
            }
            (true, true) => self.decrease(now),
            (true, false) => self.counters.holds += 1,
        }
        self.clamp();
        let period = self.params.network_rtt_ns;
        let since = now.saturating_sub(self.last_adjust);
        if self.received as f64 > 8.0 * self.mss || since > period {
            self.window += self.pending / self.window.max(1.0);
            if since >= period {
                self.window += self.eta;
                self.last_adjust = now;
            }
            self.pending = 0.0;
            self.received = 0;
            self.clamp();
        }
    }

    /// A packet of `bytes` came back trimmed, at `now` with `in_flight` bytes out.
    pub fn on_nack(&mut self, now: u64, bytes: u64, in_flight: u64) {
        self.counters.nacks += 1;
        self.ignored += bytes;
        // a trim says the queue is full: the average moves as by a delay of one network RTT
        self.average(self.params.network_rtt_ns, true);
        self.qa_armed = true;
        if !self.quick_adapt(now, true, false, 0, in_flight) {
            self.window -= bytes as f64;
            self.clamp();
        }
    }

    /// A packet of `bytes` timed out.
    pub fn on_timeout(&mut self, bytes: u64) {
        self.counters.timeouts += 1;
        self.window -= bytes as f64;
        self.clamp();
    }

    fn average(&mut self, delay: u64, ecn: bool) {
        let sample = if !ecn && delay > self.params.target_delay_ns {
            // a delay without a mark is not this flow's congestion: pull the average down
            0.25 * self.base_rtt as f64
        } else {
            delay as f64
        };
        self.avg_delay = DELAY_WEIGHT * sample + (1.0 - DELAY_WEIGHT) * self.avg_delay;
    }

    /// Fast increase near zero delay, once a window's worth of bytes came back that way.
    fn fast_increase(&mut self, acked: u64, delay: u64) -> bool {
        if delay >= FAST_DELAY_NS {
            self.fast_bytes = 0;
            self.fast = false;
            return false;
        }
        self.fast_bytes += acked;
        if self.fast || self.fast_bytes as f64 > self.window {
            self.window += acked as f64 * self.fast_scale;
            self.fast = true;
            return true;
        }
        false
    }

    fn decrease(&mut self, now: u64) {
        let target = self.params.target_delay_ns as f64;
        let due = self
            .last_decrease
            .is_none_or(|at| now.saturating_sub(at) > self.base_rtt);
        if self.avg_delay > target && due {
            let cut = self.params.gamma * (self.avg_delay - target) / self.avg_delay;
            self.window *= (1.0 - cut).max(0.5);
            self.last_decrease = Some(now);
            self.fast_bytes = 0;
            self.fast = false;
            self.counters.decreases += 1;
        } else {
            self.counters.holds += 1;
        }
    }

    /// Quick adapt: true when it acted (or the ACK echoes a window it already cut), and the ACK does no more.
    fn quick_adapt(&mut self, now: u64, loss: bool, ecn: bool, delay: u64, in_flight: u64) -> bool {
        if ecn && self.ignored < self.ignore {
            return true;
        }
        if now <= self.qa_end {
            return false;
        }
        let mut acted = false;
        let far_behind = (self.achieved as f64) < self.max_window / f64::from(1 << QA_GATE);
        let reason = self.qa_armed || loss || delay > self.params.target_delay_ns.saturating_mul(4);
        if self.qa_end != 0 && reason && far_behind {
            self.window = (self.achieved as f64).max(self.mss);
            self.ignore = in_flight;
            self.ignored = 0;
            self.qa_armed = false;
            self.pending = 0.0;
            self.received = 0;
            self.counters.quick_adapts += 1;
            acted = true;
        }
        self.achieved = 0;
        self.qa_end = now
            .saturating_add(self.base_rtt)
            .saturating_add(self.params.target_delay_ns);
        acted
    }

    fn clamp(&mut self) {
        self.window = self.window.clamp(self.mss, self.max_window.max(self.mss));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 4096;

    /// 100 Gbit/s, 14 us: uet-htsim's default path.
    fn htsim_path() -> Nscc {
        Nscc::new(NsccParams::for_path(14_000, 100_000_000_000, true), MSS)
    }

    #[test]
    fn it_starts_at_one_and_a_half_bandwidth_delay_products_and_scales_its_constants() {
        let cc = htsim_path();
        assert_eq!(cc.window(), 262_500);
        let a = 175_000.0 / REF_BDP;
        assert!((cc.fair - 5.0 * 4096.0 * a).abs() < 1e-6);
        assert_eq!(
            NsccParams::for_path(14_000, 1, true).target_delay_ns,
            10_500
        );
    }

    #[test]
    fn marks_with_delay_over_the_target_cut_the_window_once_per_rtt() {
        let mut cc = htsim_path();
        let mut now = 1_000_000;
        // a queue builds: marked ACKs with 30 us of delay (RTT 44 us) until the average is over the target
        for _ in 0..400 {
            cc.on_ack(now, 4096, 100_000, Some(44_000), true);
            now += 100;
        }
        assert!(cc.counters.decreases >= 1);
        assert!(
            cc.counters.decreases <= 400 * 100 / 14_000 + 1,
            "at most one decrease per base RTT"
        );
        assert!(cc.window() < 262_500);
        assert!(cc.window() >= 4096);
    }

    #[test]
    fn unmarked_acks_below_the_target_grow_a_cut_window_back() {
        let mut cc = htsim_path();
        cc.window = 50_000.0;
        let mut now = 0;
        for _ in 0..200 {
            cc.on_ack(now, 4096, 40_000, Some(16_000), false);
            now += 400;
        }
        assert!(cc.window() > 50_000);
        assert!(cc.counters.proportional_increases > 0);
        assert!(cc.window() <= 262_500);
    }

    #[test]
    fn marks_below_the_target_hold_the_window() {
        let mut cc = htsim_path();
        cc.window = 100_000.0;
        cc.on_ack(10, 4096, 40_000, Some(15_000), true);
        assert_eq!(cc.counters.holds, 1);
        assert_eq!(cc.window(), 100_000);
    }

    #[test]
    fn a_trim_takes_its_packet_off_the_window_and_a_timeout_too() {
        let mut cc = htsim_path();
        cc.window = 100_000.0;
        cc.on_nack(10, 4096, 90_000);
        assert_eq!(cc.window(), 100_000 - 4096);
        cc.on_timeout(4096);
        assert_eq!(cc.window(), 100_000 - 2 * 4096);
        for _ in 0..100 {
            cc.on_timeout(4096);
        }
        assert_eq!(cc.window(), 4096, "never below one packet");
    }

    #[test]
    fn quick_adapt_drops_to_what_was_delivered_after_a_trim() {
        let mut cc = htsim_path();
        cc.on_ack(1_000, 4096, 200_000, Some(14_000), false); // opens the first measuring period
        cc.on_nack(100_000, 4096, 200_000); // next period: a trim, little delivered
        assert_eq!(cc.counters.quick_adapts, 1);
        assert_eq!(cc.window(), 4096);
    }
}
