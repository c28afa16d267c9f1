//! DCQCN on a simulated host's RNIC: the notification point that
//! answers CE-marked packets with a CNP per QP per interval, and a reaction point per QP whose rate CNPs cut and
//! its timers raise, pacing the QP's requests and READ responses (never its ACKs).
//!
//! The state machines are `model::dcqcn`'s; this module keeps one per QP beside the host's transport and says
//! what the host must do (send a CNP, hold a QP back, wake it when its rate lets it go). The host calls it at
//! the points the Python host does, so the events and frames are the Python backend's.
use crate::model::dcqcn::{DcqcnParams, NotificationPoint, ReactionPoint};
use crate::wire::mac::Mac;
use crate::wire::roce::{Framer, CNP_DSCP};
use crate::wire::transport::{opcode, Packet};

/// The priority CNPs go at (DSCP 48 >> 3: strict, ahead of the data, as the RNIC agent sends its control
/// frames first).
pub const CNP_PRIORITY: usize = (CNP_DSCP >> 3) as usize;

/// What DCQCN counted on one host (the Python host's `counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcCounters {
    pub cnps_sent: u64,
    pub cnps_received: u64,
    /// Times a QP with data to send was held back by its rate.
    pub paced_waits: u64,
}

/// One QP's rate limiter, the framer of the CNPs it sends its peer, and whether its rate holds data back.
#[derive(Debug)]
struct QpCc {
    rp: ReactionPoint,
    cnp: Framer,
    paced: bool,
}

/// What an arriving packet means to DCQCN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// A CNP for the QP's limiter: consumed here, the QP's timer to re-arm.
    Cnp,
    /// A packet for the transport; with a CNP framed for the peer (`true`) to queue first.
    Pass(bool),
}

/// DCQCN's state on one host: its constants at the host's link rate, the notification point, a limiter per QP.
#[derive(Debug)]
pub struct HostCc {
    params: DcqcnParams,
    line_bps: u64,
    np: NotificationPoint,
    /// By QP number (`None` where no QP has that number).
    qps: Vec<Option<QpCc>>,
    pub counters: CcCounters,
}

impl HostCc {
    /// DCQCN with `params` (already scaled to the link, as `dcqcn.at_link` gives them) on a link of `line_bps`.
    pub fn new(params: DcqcnParams, line_bps: u64) -> HostCc {
        HostCc {
            params,
            line_bps,
            np: NotificationPoint::new(params.cnp_interval_ns),
            qps: Vec::new(),
            counters: CcCounters::default(),
        }
    }

    /// QP `qpn`'s limiter at the line rate and the framer of its CNPs (the QP's addresses, CNP DSCP).
    pub fn connect(
        &mut self,
        qpn: u32,
        addresses: (Mac, Mac, [u8; 4], [u8; 4]),
        port: u16,
    ) -> Result<(), String> {
        let (mac, gateway_mac, ip, peer_ip) = addresses;
        let cnp = Framer::new(mac, gateway_mac, ip, peer_ip, port, CNP_DSCP, 64)
            .map_err(|error| error.to_string())?;
        let at = qpn as usize;
        if self.qps.len() <= at {
            self.qps.resize_with(at + 1, || None);
        }
        self.qps[at] = Some(QpCc {
            rp: ReactionPoint::new(self.params, self.line_bps),
            cnp,
            paced: false,
        });
        Ok(())
    }

    fn qp(&mut self, qpn: u32) -> Option<&mut QpCc> {
        self.qps.get_mut(qpn as usize)?.as_mut()
    }

    /// A packet arrived for `qpn` (whose peer is `remote_qpn`) at `now`: a CNP goes to its limiter; a CE mark may
    /// earn the peer a CNP, framed into `cnp` (`Arrival::Pass(true)`).
    pub fn arrival(
        &mut self,
        now: u64,
        qpn: u32,
        remote_qpn: u32,
        packet: &Packet,
        cnp: &mut Vec<u8>,
    ) -> Arrival {
        if packet.opcode == opcode::CNP {
            self.counters.cnps_received += 1;
            if let Some(qp) = self.qp(qpn) {
                qp.rp.on_cnp(now);
            }
            return Arrival::Cnp;
        }
        if !packet.ecn_ce || !self.np.on_ce(now, u64::from(qpn)) {
            return Arrival::Pass(false);
        }
        let Some(qp) = self.qps.get_mut(qpn as usize).and_then(Option::as_mut) else {
            return Arrival::Pass(false);
        };
        cnp.clear();
        let framed = qp
            .cnp
            .encode(&Packet::new(opcode::CNP, remote_qpn, 0), cnp)
            .is_ok();
        if framed {
            self.counters.cnps_sent += 1;
        }
        Arrival::Pass(framed)
    }

    /// Whether `qpn`'s rate lets a data frame leave at `now`.
    pub fn may_send(&self, qpn: u32, now: u64) -> bool {
        self.qps
            .get(qpn as usize)
            .and_then(Option::as_ref)
            .is_none_or(|qp| qp.rp.may_send(now))
    }

    /// `qpn`, held to its rate, gave no packet while it `has_data`: whether it starts waiting for its rate now
    /// (counted; its timer must then wake it at its ready time).
    pub fn hold(&mut self, qpn: u32, has_data: bool) -> bool {
        let Some(qp) = self.qp(qpn) else {
            return false;
        };
        if qp.paced || !has_data {
            return false;
        }
        qp.paced = true;
        self.counters.paced_waits += 1;
        true
    }

    /// A frame of `len` bytes of `qpn` left at `now` (ACKs do not count against the rate).
    pub fn sent(&mut self, qpn: u32, now: u64, op: u8, len: usize) {
        if op == opcode::ACK {
            return;
        }
        if let Some(qp) = self.qp(qpn) {
            qp.rp.on_sent(now, len as u64);
        }
    }

    /// The earliest of `deadline` (the transport's), the limiter's timers and, while the QP waits for its rate,
    /// its ready time.
    pub fn deadline(&self, qpn: u32, deadline: Option<u64>) -> Option<u64> {
        let Some(qp) = self.qps.get(qpn as usize).and_then(Option::as_ref) else {
            return deadline;
        };
        let ready = qp.paced.then(|| qp.rp.ready_at());
        [qp.rp.next_deadline(), ready]
            .into_iter()
            .flatten()
            .fold(deadline, |earliest, other| {
                Some(earliest.map_or(other, |e| e.min(other)))
            })
    }

    /// `qpn`'s timer fired at `now`: its limiter's timers served, and its wait over once its rate lets it go.
    pub fn on_timer(&mut self, qpn: u32, now: u64) {
        let Some(qp) = self.qp(qpn) else {
            return;
        };
        if qp
            .rp
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
        {
            qp.rp.on_timer(now);
        }
        if qp.paced && qp.rp.ready_at() <= now {
            qp.paced = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::roce::decode;

    const LINE: u64 = 10_000_000_000;

    fn host() -> HostCc {
        let mut cc = HostCc::new(DcqcnParams::default(), LINE);
        let mac = |n: u8| [2, 0, 0, 0, n, 0];
        cc.connect(2, (mac(1), mac(10), [10, 0, 0, 1], [10, 0, 0, 2]), 49154)
            .unwrap();
        cc
    }

    fn marked(op: u8) -> Packet {
        Packet {
            ecn_ce: true,
            ..Packet::new(op, 2, 0)
        }
    }

    #[test]
    fn a_ce_mark_earns_one_cnp_per_interval_framed_for_the_peer() {
        let mut cc = host();
        let mut frame = Vec::new();
        let data = marked(opcode::WRITE_ONLY);
        assert_eq!(
            cc.arrival(1000, 2, 7, &data, &mut frame),
            Arrival::Pass(true)
        );
        let cnp = decode(&frame).unwrap();
        assert_eq!((cnp.packet.opcode, cnp.packet.dest_qp), (opcode::CNP, 7));
        assert_eq!(frame[15] >> 2, CNP_DSCP); // the TOS byte's DSCP
        let interval = DcqcnParams::default().cnp_interval_ns;
        assert_eq!(
            cc.arrival(1000 + interval - 1, 2, 7, &data, &mut frame),
            Arrival::Pass(false)
        );
        assert_eq!(
            cc.arrival(1000 + interval, 2, 7, &data, &mut frame),
            Arrival::Pass(true)
        );
        let unmarked = Packet::new(opcode::WRITE_ONLY, 2, 0);
        assert_eq!(
            cc.arrival(1 << 40, 2, 7, &unmarked, &mut frame),
            Arrival::Pass(false)
        );
        assert_eq!(cc.counters.cnps_sent, 2);
    }

    #[test]
    fn a_cnp_cuts_the_rate_and_paces_data_but_not_acks() {
        let mut cc = host();
        let mut frame = Vec::new();
        assert!(cc.may_send(2, 0));
        assert_eq!(cc.deadline(2, None), None); // released: no limiter timer
        assert_eq!(
            cc.arrival(0, 2, 7, &Packet::new(opcode::CNP, 2, 0), &mut frame),
            Arrival::Cnp
        );
        assert_eq!(cc.counters.cnps_received, 1);
        cc.sent(2, 0, opcode::ACK, 1500);
        assert!(cc.may_send(2, 0)); // an ACK does not move the pacer
        cc.sent(2, 0, opcode::WRITE_ONLY, 1500);
        assert!(!cc.may_send(2, 1));
        assert!(cc.hold(2, true) && !cc.hold(2, true)); // one wait counted, not one per look
        assert!(!host().hold(2, false)); // nothing to send: no wait
        assert_eq!(cc.counters.paced_waits, 1);
        let params = DcqcnParams::default();
        let ready = cc.qps[2].as_ref().unwrap().rp.ready_at();
        let timers = params.alpha_period_ns.min(params.increase_period_ns);
        assert_eq!(cc.deadline(2, Some(u64::MAX)), Some(ready.min(timers)));
        cc.on_timer(2, ready);
        assert!(cc.may_send(2, ready) && !cc.qps[2].as_ref().unwrap().paced);
    }

    #[test]
    fn unknown_qps_are_left_alone() {
        let mut cc = host();
        let mut frame = Vec::new();
        assert!(cc.may_send(9, 0) && !cc.hold(9, true));
        assert_eq!(cc.deadline(9, Some(5)), Some(5));
        assert_eq!(
            cc.arrival(0, 9, 1, &marked(opcode::ACK), &mut frame),
            Arrival::Pass(false)
        );
        cc.on_timer(9, 0);
        cc.sent(9, 0, opcode::SEND_ONLY, 100);
    }
}
