//! The RC (reliable connected) transport of one queue pair, without I/O.
//!
//! A state machine in the manner of smoltcp and quinn-proto: the caller hands it inbound packets
//! ([`RcQueuePair::receive`]), pulls outbound ones while its link can take them
//! ([`RcQueuePair::next_packet`]), and calls [`RcQueuePair::on_timer`] once [`RcQueuePair::next_deadline`]
//! has passed. Times are integer nanoseconds supplied by the caller; memory is the caller's too, reached
//! through the [`Memory`] trait, so the emulator's registered regions and the simulator's flat memory are
//! driven by the same code.
//!
//! Both halves of a QP live here. The *requester* segments work requests at the path MTU, numbers packets
//! with 24-bit PSNs, keeps at most `max_inflight` unacknowledged, asks for an ACK every `ack_every` packets
//! and at the end of every message, and recovers with go-back-N: on a PSN-sequence-error NAK, on an ACK
//! that skips READ responses (implied NAK) and on the retransmission timeout, it sends again from the first
//! packet the responder lacks. The *responder* executes in-order packets against memory, NAKs the first gap
//! once and then drops until the expected PSN comes back, answers RNR when a SEND finds no receive posted,
//! re-ACKs duplicates and re-executes duplicate READs. Errors end as completions with a status, and the QP
//! then flushes everything else, as in verbs. (Learned from the IBTA rules as Linux rxe implements them.)
//!
//! Every packet is hostile: any opcode, PSN, length or key a decoder can produce ends as a counted drop, a
//! NAK or a QP in error, never a panic.
use std::collections::VecDeque;
use std::fmt;

use crate::model::rdma_params::{MAX_MR_BYTES, PATHS_MTU, ROCE_OVERHEAD};
use crate::wire::transport::{
    opcode, psn_add, psn_diff, Packet, NAK_INVALID_REQUEST, NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR, NAK_REMOTE_OPERATIONAL_ERROR, PSN_MASK, SYNDROME_ACK,
    SYNDROME_RNR_NAK,
};

/// `rnr_retry` 7 means "retry for ever" (IBTA), so an RNR NAK never exhausts it.
pub const INFINITE_RNR_RETRY: u8 = 7;

/// The 5-bit RNR NAK timer of IBTA table 45, in nanoseconds (code 0 is the longest).
pub const RNR_TIMER_NS: [u64; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// A key, bound or permission check of a [`Memory`] failed: the work request or the request packet that
/// asked for it fails with a protection or access status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessError;

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("memory access refused")
    }
}

/// The registered memory a QP may touch (its protection domain), the caller's.
///
/// `local` and `remote` check a key, bounds and permission once and hand back a window of exactly
/// `length` bytes; the QP keeps it while the work request (or inbound message, or READ) lasts and moves
/// bytes through it with `read` and `write`, always within `0..length`. The QP never asks for a window of
/// zero bytes: a zero-length transfer is checked against nothing, as in verbs.
pub trait Memory {
    /// A checked range of registered memory.
    type Window;

    /// The range `[addr, addr + length)` under the local key `lkey` (`write`: the QP will write it).
    fn local(
        &mut self,
        lkey: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<Self::Window, AccessError>;

    /// The range `[addr, addr + length)` under the remote key `rkey` (`write`: a remote WRITE or SEND).
    fn remote(
        &mut self,
        rkey: u32,
        addr: u64,
        length: u64,
        write: bool,
    ) -> Result<Self::Window, AccessError>;

    /// Appends `len` bytes of `window` from `offset` to `out`.
    fn read(&mut self, window: &Self::Window, offset: u64, len: usize, out: &mut Vec<u8>);

    /// Copies `data` into `window` at `offset`.
    fn write(&mut self, window: &Self::Window, offset: u64, data: &[u8]);
}

/// What a send work request asks for (`ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WrOpcode {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
}

impl WrOpcode {
    /// Every opcode with its verbs name, for the bindings' enum.
    pub const ALL: [(&'static str, WrOpcode); 5] = [
        ("RDMA_WRITE", WrOpcode::RdmaWrite),
        ("RDMA_WRITE_WITH_IMM", WrOpcode::RdmaWriteWithImm),
        ("SEND", WrOpcode::Send),
        ("SEND_WITH_IMM", WrOpcode::SendWithImm),
        ("RDMA_READ", WrOpcode::RdmaRead),
    ];

    /// The opcode of value `value`, if there is one.
    pub fn from_u8(value: u8) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|&&(_, op)| op as u8 == value)
            .map(|&(_, op)| op)
    }

    /// The completion opcode the requester reports for it.
    pub fn completion(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        }
    }

    /// The (first, middle, last, only) packet opcodes of a WRITE or SEND message (none for a READ).
    fn sequence(self) -> Option<[u8; 4]> {
        use opcode::*;
        match self {
            WrOpcode::RdmaWrite => Some([WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY]),
            WrOpcode::RdmaWriteWithImm => {
                Some([WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST_IMM, WRITE_ONLY_IMM])
            }
            WrOpcode::Send => Some([SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY]),
            WrOpcode::SendWithImm => Some([SEND_FIRST, SEND_MIDDLE, SEND_LAST_IMM, SEND_ONLY_IMM]),
            WrOpcode::RdmaRead => None,
        }
    }
}

/// A completion's status (`ibv_wc_status`, the values verbs gives them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocProtErr = 4,
    WrFlushErr = 5,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
}

impl WcStatus {
    /// Every status with its verbs name, for the bindings' enum.
    pub const ALL: [(&'static str, WcStatus); 10] = [
        ("SUCCESS", WcStatus::Success),
        ("LOC_LEN_ERR", WcStatus::LocLenErr),
        ("LOC_QP_OP_ERR", WcStatus::LocQpOpErr),
        ("LOC_PROT_ERR", WcStatus::LocProtErr),
        ("WR_FLUSH_ERR", WcStatus::WrFlushErr),
        ("REM_INV_REQ_ERR", WcStatus::RemInvReqErr),
        ("REM_ACCESS_ERR", WcStatus::RemAccessErr),
        ("REM_OP_ERR", WcStatus::RemOpErr),
        ("RETRY_EXC_ERR", WcStatus::RetryExcErr),
        ("RNR_RETRY_EXC_ERR", WcStatus::RnrRetryExcErr),
    ];

    /// The status of value `value`, if there is one.
    pub fn from_u8(value: u8) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|&&(_, s)| s as u8 == value)
            .map(|&(_, s)| s)
    }

    /// What the requester reports for a NAK of `syndrome` other than sequence error and RNR.
    fn of_nak(syndrome: u8) -> Self {
        match syndrome {
            NAK_INVALID_REQUEST => WcStatus::RemInvReqErr,
            NAK_REMOTE_ACCESS_ERROR => WcStatus::RemAccessErr,
            _ => WcStatus::RemOpErr,
        }
    }
}

/// A completion's opcode (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    /// Every opcode with its verbs name, for the bindings' enum.
    pub const ALL: [(&'static str, WcOpcode); 5] = [
        ("SEND", WcOpcode::Send),
        ("RDMA_WRITE", WcOpcode::RdmaWrite),
        ("RDMA_READ", WcOpcode::RdmaRead),
        ("RECV", WcOpcode::Recv),
        ("RECV_RDMA_WITH_IMM", WcOpcode::RecvRdmaWithImm),
    ];

    /// The opcode of value `value`, if there is one.
    pub fn from_u8(value: u8) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|&&(_, op)| op as u8 == value)
            .map(|&(_, op)| op)
    }
}

/// A send work request (`ibv_send_wr` with one scatter/gather entry): `addr`/`length`/`lkey` the local
/// buffer, `remote_addr`/`rkey` the peer's (WRITE, READ), `imm` the immediate (the `_WITH_IMM` opcodes);
/// an unsignaled WR completes without a completion when it succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub addr: u64,
    pub length: u64,
    pub lkey: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub imm: u32,
    pub signaled: bool,
}

/// A receive work request (`ibv_recv_wr` with one scatter/gather entry): where the next SEND lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub addr: u64,
    pub length: u64,
    pub lkey: u32,
}

/// One work completion (`ibv_wc`); `timestamp` is the caller's to fill (the model leaves 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub qp_num: u32,
    pub byte_len: u64,
    pub imm: Option<u32>,
    pub timestamp: u64,
}

/// The QP attributes of `ibv_modify_qp` that the transport uses: the path MTU, the local ACK timeout and
/// its retries, the RNR retries and the wait the responder asks for, ACK coalescing, the window of
/// unacknowledged PSNs, the READs outstanding at once, the largest message, and how many requests the
/// responder holds past a gap (`reorder`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcConfig {
    pub mtu: u32,
    pub timeout_ns: u64,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub rnr_timer_ns: u64,
    pub ack_every: u32,
    pub max_inflight: u32,
    pub max_rd_atomic: u32,
    pub max_msg: u64,
    /// Requests the responder holds when they arrive ahead of its expected PSN, executed in PSN order once
    /// the gap fills: an adaptively routed fabric reorders packets without losing any, and go-back-N would
    /// resend what the switches only delayed. 0 (IB's default) NAKs the first packet past a gap. A gap still
    /// open `reorder_wait_ns` after the first packet held (0: [`REORDER_WAIT`] of the ACK timeout) is taken
    /// for a loss and NAKed: the requester's window may hold too few packets to go past the hold, and would
    /// wait its whole timeout.
    pub reorder: u32,
    pub reorder_wait_ns: u64,
}

/// The most requests a responder holds past a gap.
pub const MAX_REORDER: u32 = 4096;
/// How long a responder holds requests past a gap before it NAKs it, unless the QP says: a fraction (1/n) of
/// `timeout_ns`.
pub const REORDER_WAIT: u64 = 64;

/// Why an [`RcConfig`] was refused (the message of the `ValueError` Python sees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Not one of [`PATHS_MTU`].
    Mtu(u32),
    /// `max_inflight`, `ack_every` or `max_rd_atomic` is 0.
    ZeroWindow,
    /// `reorder` above [`MAX_REORDER`].
    Reorder(u32),
    /// `retry_cnt` or `rnr_retry` above 7 (3 bits on the wire).
    Retry,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Mtu(mtu) => {
                write!(f, "path MTU {mtu}: choose one of ")?;
                for (i, choice) in PATHS_MTU.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{choice}")?;
                }
                Ok(())
            }
            ConfigError::ZeroWindow => {
                f.write_str("max_inflight, ack_every and max_rd_atomic must be at least 1")
            }
            ConfigError::Retry => f.write_str("retry_cnt and rnr_retry are 0 to 7"),
            ConfigError::Reorder(reorder) => {
                write!(
                    f,
                    "reorder {reorder}: a responder holds at most {MAX_REORDER} requests"
                )
            }
        }
    }
}

impl Default for RcConfig {
    /// perftest's defaults: IB "timeout 14" (67.1 ms), 7 retries, a 1 ms RNR wait.
    fn default() -> Self {
        RcConfig {
            mtu: 1024,
            timeout_ns: 4096 << 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rnr_timer_ns: 1_000_000,
            ack_every: 16,
            max_inflight: 128,
            max_rd_atomic: 16,
            max_msg: MAX_MR_BYTES,
            reorder: 0,
            reorder_wait_ns: 0,
        }
    }
}

impl RcConfig {
    /// `self` if a QP can run with it: a path MTU, windows of at least one, 3-bit retry counts.
    pub fn validated(self) -> Result<Self, ConfigError> {
        if !PATHS_MTU.contains(&self.mtu) {
            return Err(ConfigError::Mtu(self.mtu));
        }
        if self.max_inflight < 1 || self.ack_every < 1 || self.max_rd_atomic < 1 {
            return Err(ConfigError::ZeroWindow);
        }
        if self.retry_cnt > 7 || self.rnr_retry > 7 {
            return Err(ConfigError::Retry);
        }
        if self.reorder > MAX_REORDER {
            return Err(ConfigError::Reorder(self.reorder));
        }
        Ok(self)
    }

    /// Packets of a message of `length` bytes (one at least: a zero-length message is one packet).
    fn packets(&self, length: u64) -> u64 {
        length.div_ceil(u64::from(self.mtu.max(1))).max(1)
    }

    /// Bytes of packet `index` of a message of `length` bytes.
    fn chunk_len(&self, length: u64, index: u64) -> usize {
        let mtu = u64::from(self.mtu);
        let rest = length.saturating_sub(index.saturating_mul(mtu));
        usize::try_from(rest.min(mtu)).unwrap_or(0)
    }

    fn offset(&self, index: u64) -> u64 {
        index.saturating_mul(u64::from(self.mtu))
    }
}

/// The local ACK timeout a QP gets unless the application sets one.
///
/// IB's timeout 14 (67 ms, perftest's default) is thousands of windows at 100 Gbit/s. On an emulated link of
/// tens of Mbit/s one window of 128 frames takes tens of milliseconds, and a sender that PFC holds back in an
/// 8-to-1 incast waits longer than 67 ms between ACKs without losing anything: timeouts would fire on
/// paused packets, not lost ones. So the timeout scales with the link: the smallest IB value (4.096 us x
/// 2^t, t >= 14) that covers 8 windows of path-MTU frames at the link rate (20 Mbit/s: 537 ms; 100 Mbit/s:
/// 134 ms; 1 Gbit/s and up: 67 ms).
pub fn default_timeout_ns(rate_bps: u64, mtu: u64, max_inflight: u64) -> u64 {
    let frame_bits = (u128::from(mtu) + ROCE_OVERHEAD as u128 + 14) * 8;
    let needed =
        8 * u128::from(max_inflight) * frame_bits * 1_000_000_000 / u128::from(rate_bps.max(1));
    let mut exponent = 14;
    while (4096u128 << exponent) < needed && exponent < 31 {
        exponent += 1;
    }
    4096 << exponent
}

/// The RNR timer code of the shortest wait at or above `ns` (code 0, the longest, if none is).
pub fn rnr_timer_code(ns: u64) -> u8 {
    (1u8..32)
        .find(|&code| RNR_TIMER_NS[usize::from(code)] >= ns)
        .unwrap_or(0)
}

/// A QP's state as verbs names it (only the three the transport tells apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Init,
    Rts,
    Error,
}

impl QpState {
    /// The verbs name: "INIT", "RTS" or "ERROR".
    pub fn name(self) -> &'static str {
        match self {
            QpState::Init => "INIT",
            QpState::Rts => "RTS",
            QpState::Error => "ERROR",
        }
    }
}

/// Why a verb was refused outright (a `ValueError` in Python).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbError {
    /// `connect` on a QP that is not in INIT.
    NotInit { qpn: u32, state: QpState },
    /// `post_send` before `connect`.
    NotConnected { qpn: u32 },
}

impl fmt::Display for VerbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbError::NotInit { qpn, state } => {
                write!(f, "QP {qpn} is {}, not INIT", state.name())
            }
            VerbError::NotConnected { qpn } => write!(f, "QP {qpn} is not connected"),
        }
    }
}

/// What a QP counts, for the RNIC's statistics and the tests (names as [`RcCounters::NAMES`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcCounters {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub bytes_sent: u64,
    pub retransmitted_packets: u64,
    pub timeouts: u64,
    pub naks_sent: u64,
    pub naks_received: u64,
    pub seq_naks_sent: u64,
    pub rnr_naks_sent: u64,
    pub rnr_naks_received: u64,
    pub duplicate_packets: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    pub ecn_ce_received: u64,
    pub malformed_packets: u64,
    /// Requests that arrived ahead of a gap and were held, with [`RcConfig::reorder`], until it filled.
    pub reordered_packets: u64,
}

impl RcCounters {
    /// The counters' names, in the order [`RcCounters::values`] gives them (`COUNTERS` in Python).
    pub const NAMES: [&'static str; RcCounters::COUNT] = [
        "packets_sent",
        "packets_received",
        "bytes_sent",
        "retransmitted_packets",
        "timeouts",
        "naks_sent",
        "naks_received",
        "seq_naks_sent",
        "rnr_naks_sent",
        "rnr_naks_received",
        "duplicate_packets",
        "acks_sent",
        "acks_received",
        "ecn_ce_received",
        "malformed_packets",
        "reordered_packets",
    ];

    /// How many counters there are.
    pub const COUNT: usize = 16;

    /// The values in the order of [`RcCounters::NAMES`].
    pub fn values(&self) -> [u64; RcCounters::COUNT] {
        [
            self.packets_sent,
            self.packets_received,
            self.bytes_sent,
            self.retransmitted_packets,
            self.timeouts,
            self.naks_sent,
            self.naks_received,
            self.seq_naks_sent,
            self.rnr_naks_sent,
            self.rnr_naks_received,
            self.duplicate_packets,
            self.acks_sent,
            self.acks_received,
            self.ecn_ce_received,
            self.malformed_packets,
            self.reordered_packets,
        ]
    }
}

/// A posted work request the requester has not completed yet.
#[derive(Debug)]
struct SendOp<W> {
    wr: SendWr,
    first_psn: u32,
    npkts: u64,
    /// The local buffer (none for a zero-length WR or one that failed its check).
    local: Option<W>,
    /// A local error found at post time, reported in turn.
    error: Option<WcStatus>,
    /// READ: responses that arrived in order.
    read_received: u64,
    /// READ: the PSN of the last re-request after a gap.
    rerequested_at: Option<u32>,
}

impl<W> SendOp<W> {
    fn is_read(&self) -> bool {
        self.wr.opcode == WrOpcode::RdmaRead
    }

    /// Whether `psn` is one of this WR's PSNs.
    fn covers(&self, psn: u32) -> bool {
        u64::try_from(psn_diff(psn, self.first_psn)).is_ok_and(|index| index < self.npkts)
    }

    /// Whether some of this READ's responses are still missing.
    fn read_pending(&self) -> bool {
        self.is_read() && self.read_received < self.npkts
    }

    /// The PSN of the first READ response not yet received.
    fn missing_psn(&self) -> u32 {
        psn_add(self.first_psn, psn_steps(self.read_received))
    }

    fn end_psn(&self) -> u32 {
        psn_add(self.first_psn, psn_steps(self.npkts))
    }
}

/// READ responses the responder still owes, generated lazily.
#[derive(Debug)]
struct ReadJob<W> {
    first_psn: u32,
    next_index: u64,
    npkts: u64,
    /// The bytes read (none for a zero-length READ) and their length.
    view: Option<W>,
    len: u64,
}

/// An entry of the responder's output: an ACK or NAK, or READ responses.
#[derive(Debug)]
enum Response<W> {
    Reply { psn: u32, syndrome: u8, msn: u32 },
    Read(ReadJob<W>),
}

/// Which kind of message the responder is in the middle of: a WRITE, or a SEND into the receive it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InboundKind {
    Write,
    Send(RecvWr),
}

/// The message the responder is in the middle of.
#[derive(Debug)]
struct Inbound<W> {
    kind: InboundKind,
    /// The buffer (none for a zero-length message) and its length.
    view: Option<W>,
    len: u64,
    offset: u64,
}

/// A PSN step of `n` packets (the PSN space wraps at 2^24, so only the low bits of `n` matter).
fn psn_steps(n: u64) -> i64 {
    (n & u64::from(PSN_MASK)) as i64
}

/// `item` at the back of `queue`, whose first buffer holds one item: a QP's queues mostly hold one (an
/// all-to-all's QP has one WRITE, one receive, one ACK and one completion at a time), and `VecDeque` would
/// make room for four (alltoall-lossless at fattree,16, 1.05 M QPs: peak 5.99 -> 5.49 GB). A second item
/// grows the buffer as usual.
fn push_small<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.capacity() == 0 {
        queue.reserve_exact(1);
    }
    queue.push_back(item);
}

/// Requester and responder of one RC queue pair; `W` is the [`Memory`]'s window type.
#[derive(Debug)]
pub struct RcQueuePair<W> {
    qpn: u32,
    config: RcConfig,
    initial_psn: u32,
    state: QpState,
    remote_qpn: u32,
    counters: RcCounters,
    completions: VecDeque<Completion>,
    // requester
    sq: VecDeque<SendOp<W>>,
    una: u32,
    tx_psn: u32,
    end_psn: u32,
    high_psn: u32,
    rto_deadline: Option<u64>,
    rnr_until: Option<u64>,
    retries_left: u8,
    rnr_left: u8,
    /// The index in `sq` of the WR `op_at` found last (the one being transmitted, usually).
    tx_op: Option<usize>,
    // responder
    epsn: u32,
    msn: u32,
    nak_sent: bool,
    rq: VecDeque<RecvWr>,
    inbound: Option<Inbound<W>>,
    /// Requests held past a gap ([`RcConfig::reorder`]): slot `i` is PSN `epsn + 1 + i`; and when the gap is
    /// NAKed if it is still open.
    held: VecDeque<Option<Packet>>,
    hold_deadline: Option<u64>,
    /// ACKs and NAKs (one pending ACK at most) and READ jobs, in the order they go out.
    out: VecDeque<Response<W>>,
}

/// A snapshot of one entry of the responder's output (an ACK/NAK, or the READ responses still owed), for
/// tests and the bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingResponse {
    Reply {
        psn: u32,
        syndrome: u8,
        msn: u32,
    },
    Read {
        first_psn: u32,
        next_index: u64,
        npkts: u64,
    },
}

impl<W> RcQueuePair<W> {
    /// A QP in INIT whose first send PSN is `initial_psn` (24 bits kept).
    pub fn new(qpn: u32, config: RcConfig, initial_psn: u32) -> Self {
        let psn = initial_psn & PSN_MASK;
        RcQueuePair {
            qpn,
            config,
            initial_psn: psn,
            state: QpState::Init,
            remote_qpn: 0,
            counters: RcCounters::default(),
            completions: VecDeque::new(),
            sq: VecDeque::new(),
            una: psn,
            tx_psn: psn,
            end_psn: psn,
            high_psn: psn,
            rto_deadline: None,
            rnr_until: None,
            retries_left: config.retry_cnt,
            rnr_left: config.rnr_retry,
            tx_op: None,
            epsn: 0,
            msn: 0,
            nak_sent: false,
            rq: VecDeque::new(),
            inbound: None,
            held: VecDeque::new(),
            hold_deadline: None,
            out: VecDeque::new(),
        }
    }

    // --- what callers read -------------------------------------------------------------------

    /// This QP's number (the completions carry it).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The attributes it was made with.
    pub fn config(&self) -> &RcConfig {
        &self.config
    }
    /// Its first send PSN (24 bits).
    pub fn initial_psn(&self) -> u32 {
        self.initial_psn
    }
    /// INIT until `connect`, RTS, or ERROR once a WR failed or the responder refused a request.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// The peer's QP number (0 before `connect`): the destination of every packet it sends.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }
    /// What it has counted so far.
    pub fn counters(&self) -> &RcCounters {
        &self.counters
    }
    /// The oldest PSN not acknowledged.
    pub fn una(&self) -> u32 {
        self.una
    }
    /// The next PSN the requester sends.
    pub fn tx_psn(&self) -> u32 {
        self.tx_psn
    }
    /// One past the last PSN posted work uses.
    pub fn end_psn(&self) -> u32 {
        self.end_psn
    }
    /// One past the highest PSN ever sent.
    pub fn high_psn(&self) -> u32 {
        self.high_psn
    }
    /// The PSN the responder expects next.
    pub fn epsn(&self) -> u32 {
        self.epsn
    }
    /// The responder's message sequence number.
    pub fn msn(&self) -> u32 {
        self.msn
    }
    /// Whether the responder NAKed the current gap already (and drops until it closes).
    pub fn nak_sent(&self) -> bool {
        self.nak_sent
    }
    /// When the retransmission timer fires, if it runs.
    pub fn rto_deadline(&self) -> Option<u64> {
        self.rto_deadline
    }
    /// When the wait an RNR NAK asked for ends, if one runs.
    pub fn rnr_until(&self) -> Option<u64> {
        self.rnr_until
    }
    /// Timeouts left before the WR fails with `RetryExcErr` (reset by progress).
    pub fn retries_left(&self) -> u8 {
        self.retries_left
    }
    /// RNR NAKs left before the WR fails with `RnrRetryExcErr` (reset by progress).
    pub fn rnr_left(&self) -> u8 {
        self.rnr_left
    }
    /// Work requests on the send queue (posted, not completed).
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }
    /// Receives posted and not consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }
    /// Completions waiting for `poll_completions`.
    pub fn completions_len(&self) -> usize {
        self.completions.len()
    }
    /// The responder's output, in order.
    pub fn pending_responses(&self) -> impl Iterator<Item = PendingResponse> + '_ {
        self.out.iter().map(|entry| match entry {
            Response::Reply { psn, syndrome, msn } => PendingResponse::Reply {
                psn: *psn,
                syndrome: *syndrome,
                msn: *msn,
            },
            Response::Read(job) => PendingResponse::Read {
                first_psn: job.first_psn,
                next_index: job.next_index,
                npkts: job.npkts,
            },
        })
    }

    // --- verbs ---------------------------------------------------------------------------------

    /// INIT -> RTR -> RTS: `remote_psn` is the peer's first send PSN.
    pub fn connect(&mut self, remote_qpn: u32, remote_psn: u32) -> Result<(), VerbError> {
        if self.state != QpState::Init {
            return Err(VerbError::NotInit {
                qpn: self.qpn,
                state: self.state,
            });
        }
        self.remote_qpn = remote_qpn;
        self.epsn = remote_psn & PSN_MASK;
        self.state = QpState::Rts;
        Ok(())
    }

    /// Queues `wr`; a local error (length, key) completes it with that status once its turn comes.
    pub fn post_send<M: Memory<Window = W>>(
        &mut self,
        memory: &mut M,
        wr: SendWr,
    ) -> Result<(), VerbError> {
        match self.state {
            QpState::Init => return Err(VerbError::NotConnected { qpn: self.qpn }),
            QpState::Error => {
                self.complete(
                    wr.wr_id,
                    WcStatus::WrFlushErr,
                    wr.opcode.completion(),
                    0,
                    None,
                );
                return Ok(());
            }
            QpState::Rts => {}
        }
        let (local, error) = local_buffer(memory, &wr, self.config.max_msg);
        if let (Some(status), true) = (error, self.sq.is_empty()) {
            self.complete(wr.wr_id, status, wr.opcode.completion(), 0, None);
            self.enter_error(false);
            return Ok(());
        }
        // A bad WR behind others takes one PSN that is never sent: transmission stops there, and it
        // fails once everything before it completed.
        let npkts = if error.is_some() {
            1
        } else {
            self.config.packets(wr.length)
        };
        push_small(
            &mut self.sq,
            SendOp {
                wr,
                first_psn: self.end_psn,
                npkts,
                local,
                error,
                read_received: 0,
                rerequested_at: None,
            },
        );
        self.end_psn = psn_add(self.end_psn, psn_steps(npkts));
        Ok(())
    }

    /// Queues a receive for the next SEND or WRITE with immediate (flushed at once in ERROR).
    pub fn post_recv(&mut self, wr: RecvWr) {
        if self.state == QpState::Error {
            self.complete(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
            return;
        }
        push_small(&mut self.rq, wr);
    }

    /// Up to `max_entries` completions (all with `None`), oldest first.
    pub fn poll_completions(
        &mut self,
        max_entries: Option<usize>,
    ) -> std::collections::vec_deque::Drain<'_, Completion> {
        let n = max_entries.map_or(self.completions.len(), |m| m.min(self.completions.len()));
        self.completions.drain(..n)
    }

    // --- the I/O layer's side --------------------------------------------------------------------

    /// When `on_timer` is due next: the retransmission timeout or the end of an RNR wait.
    pub fn next_deadline(&self) -> Option<u64> {
        [self.rto_deadline, self.rnr_until, self.hold_deadline]
            .into_iter()
            .flatten()
            .min()
    }

    /// Ends an RNR wait that is over, and on a retransmission timeout goes back to the oldest
    /// unacknowledged PSN (or fails the WR there once `retry_cnt` retries are spent).
    pub fn on_timer(&mut self, now: u64) {
        if self.rnr_until.is_some_and(|until| now >= until) {
            self.rnr_until = None;
        }
        if self.hold_deadline.is_some_and(|at| now >= at) {
            // the gap did not fill: taken for a loss, NAKed; what was held comes again with the resend
            self.hold_deadline = None;
            self.held.clear();
            if self.state == QpState::Rts && !self.nak_sent {
                self.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                self.reply(NAK_PSN_SEQUENCE_ERROR, self.epsn);
            }
        }
        if self.rto_deadline.is_none_or(|deadline| now < deadline) {
            return;
        }
        self.rto_deadline = None;
        if self.state != QpState::Rts || self.sq.is_empty() {
            return;
        }
        self.counters.timeouts += 1;
        if self.retries_left == 0 {
            let at = self.op_at(self.una).unwrap_or(0);
            self.fail(at, WcStatus::RetryExcErr);
            return;
        }
        self.retries_left -= 1;
        self.tx_psn = self.una;
    }

    /// The next packet to send into `out` (its payload buffer reused), if any: responses and ACKs first
    /// (they unblock the peer), then requests.
    ///
    /// `data` false (a congestion control's rate limiter holds the QP back): only an ACK or NAK may go, no
    /// request and no READ response.
    pub fn next_packet<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        data: bool,
        memory: &mut M,
        out: &mut Packet,
    ) -> bool {
        if let Some(head) = self.out.front() {
            return (data || matches!(head, Response::Reply { .. }))
                && self.next_response(memory, out);
        }
        if !data
            || self.state != QpState::Rts
            || self.rnr_until.is_some()
            || self.tx_psn == self.end_psn
        {
            return false;
        }
        if i64::from(psn_diff(self.tx_psn, self.una)) >= i64::from(self.config.max_inflight) {
            return false;
        }
        let Some(at) = self.op_at(self.tx_psn) else {
            return false; // tx_psn always lies in a posted request; nothing to send if it did not
        };
        let op = &self.sq[at];
        if op.error.is_some() {
            return false;
        }
        if op.is_read() && self.reads_outstanding(at) >= u64::from(self.config.max_rd_atomic) {
            return false;
        }
        let index = u64::try_from(psn_diff(self.tx_psn, op.first_psn)).unwrap_or(0);
        let advance = self.request_packet(at, index, memory, out);
        if self.tx_psn == self.una && self.rto_deadline.is_none() {
            self.rto_deadline = Some(now.saturating_add(self.config.timeout_ns));
        }
        if psn_diff(self.tx_psn, self.high_psn) < 0 {
            self.counters.retransmitted_packets += 1;
        }
        self.tx_psn = psn_add(self.tx_psn, psn_steps(advance));
        if psn_diff(self.tx_psn, self.high_psn) > 0 {
            self.high_psn = self.tx_psn;
        }
        self.count_sent(out);
        true
    }

    /// Whether a READ response or a request is waiting to go (window and RNR permitting).
    pub fn has_data(&self) -> bool {
        self.out
            .iter()
            .any(|entry| matches!(entry, Response::Read(_)))
            || (self.state == QpState::Rts && self.tx_psn != self.end_psn)
    }

    /// One inbound packet for this QP: a request, a response or an ACK/NAK.
    pub fn receive<M: Memory<Window = W>>(&mut self, now: u64, packet: &Packet, memory: &mut M) {
        self.receive_with_payload(now, packet, &packet.payload, memory);
    }

    /// [`Self::receive`] with the payload held apart from the packet's headers (`packet.payload` is not read):
    /// a caller that decoded a frame hands its payload over where it lies, without a copy.
    pub fn receive_with_payload<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        packet: &Packet,
        payload: &[u8],
        memory: &mut M,
    ) {
        if self.state != QpState::Rts {
            return;
        }
        self.counters.packets_received += 1;
        if packet.ecn_ce {
            self.counters.ecn_ce_received += 1;
        }
        match packet.opcode {
            opcode::ACK => self.on_ack(now, packet),
            opcode::READ_RESPONSE_FIRST..=opcode::READ_RESPONSE_ONLY => {
                self.on_read_response(now, packet, payload, memory)
            }
            op if op <= opcode::READ_REQUEST => self.on_request(now, packet, payload, memory),
            _ => {}
        }
    }

    fn count_sent(&mut self, packet: &Packet) {
        self.counters.packets_sent += 1;
        self.counters.bytes_sent += packet.payload.len() as u64;
    }

    // --- requester -------------------------------------------------------------------------------

    /// The index in `sq` of the WR that `psn` belongs to.
    fn op_at(&mut self, psn: u32) -> Option<usize> {
        if let Some(at) = self.tx_op {
            if self.sq.get(at).is_some_and(|op| op.covers(psn)) {
                return Some(at);
            }
        }
        let found = self.sq.iter().position(|op| op.covers(psn))?;
        self.tx_op = Some(found);
        Some(found)
    }

    /// Responses one READ request asks for: the rest of the WR, at most a window.
    ///
    /// A large READ goes out as several requests, each for at most `max_inflight` responses, so that
    /// responses are clocked by the requester's progress as WRITE data is by ACKs: an emulated RNIC that
    /// receives slower than its peer sends would otherwise lose most of a 64 MiB READ in its socket buffer.
    fn read_chunk(&self, op: &SendOp<W>, index: u64) -> u64 {
        let room = i64::from(self.config.max_inflight) - i64::from(psn_diff(self.tx_psn, self.una));
        op.npkts
            .saturating_sub(index)
            .min(u64::try_from(room).unwrap_or(0))
    }

    /// READs other than `sq[besides]` that were (partly) requested and still miss responses.
    fn reads_outstanding(&self, besides: usize) -> u64 {
        let tx_psn = self.tx_psn;
        self.sq
            .iter()
            .enumerate()
            .filter(|&(i, op)| {
                i != besides && op.read_pending() && psn_diff(tx_psn, op.first_psn) > 0
            })
            .count() as u64
    }

    /// Builds packet `index` of `sq[at]` at `tx_psn` into `out`; returns the PSNs it uses.
    fn request_packet<M: Memory<Window = W>>(
        &self,
        at: usize,
        index: u64,
        memory: &mut M,
        out: &mut Packet,
    ) -> u64 {
        let op = &self.sq[at];
        let wr = &op.wr;
        let psn = self.tx_psn;
        reset(out, self.remote_qpn, psn);
        let Some([first, middle, last, only]) = wr.opcode.sequence() else {
            let chunk = self.read_chunk(op, index);
            let offset = self.config.offset(index);
            let wanted = chunk.saturating_mul(u64::from(self.config.mtu));
            out.opcode = opcode::READ_REQUEST;
            out.va = wr.remote_addr.wrapping_add(offset);
            out.rkey = wr.rkey;
            out.dma_len = dma_len(wr.length.saturating_sub(offset).min(wanted));
            return chunk;
        };
        let ends = index + 1 == op.npkts;
        out.opcode = if op.npkts == 1 {
            only
        } else if index == 0 {
            first
        } else if ends {
            last
        } else {
            middle
        };
        let max_inflight = i64::from(self.config.max_inflight);
        let fills_window = i64::from(psn_diff(psn_add(psn, 1), self.una)) >= max_inflight;
        let ack_every = i64::from(self.config.ack_every);
        let every =
            i64::from(psn_diff(psn, self.initial_psn)).rem_euclid(ack_every) == ack_every - 1;
        out.ack_req = ends || fills_window || every;
        out.solicited = ends && wr.opcode == WrOpcode::SendWithImm;
        if index == 0 && matches!(wr.opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
            out.va = wr.remote_addr;
            out.rkey = wr.rkey;
            out.dma_len = dma_len(wr.length);
        }
        if ends && opcode::has_imm(out.opcode) {
            out.imm = wr.imm;
        }
        let len = self.config.chunk_len(wr.length, index);
        if let (Some(window), true) = (&op.local, len > 0) {
            memory.read(window, self.config.offset(index), len, &mut out.payload);
        }
        1
    }

    fn on_ack(&mut self, now: u64, packet: &Packet) {
        let kind = packet.syndrome >> 5;
        let psn = packet.psn & PSN_MASK;
        if kind == 0 {
            self.counters.acks_received += 1;
            if psn_diff(psn, self.una) >= -1 && psn_diff(psn, self.high_psn) < 0 {
                self.acknowledge(now, psn_add(psn, 1));
            }
            return;
        }
        self.counters.naks_received += 1;
        if psn_diff(psn, self.una) < 0 || psn_diff(psn, self.high_psn) >= 0 {
            return; // a NAK for something already settled, or never sent
        }
        self.acknowledge(now, psn);
        if self.state != QpState::Rts {
            return;
        }
        // An RNR or sequence NAK resends from the first PSN the responder lacks: `una` now, which is `psn`
        // unless this NAK skipped READ responses (implied NAK: `acknowledge` stopped `una` at the first
        // missing one). Resuming at `psn` there would never ask for that response again and would send past
        // `una` with no retransmission timer running: a hang.
        if kind == 1 {
            self.counters.rnr_naks_received += 1;
            if self.config.rnr_retry != INFINITE_RNR_RETRY {
                if self.rnr_left == 0 {
                    let at = self.op_at(psn).unwrap_or(0);
                    self.fail(at, WcStatus::RnrRetryExcErr);
                    return;
                }
                self.rnr_left -= 1;
            }
            let wait = RNR_TIMER_NS[usize::from(packet.syndrome & 0x1F)];
            self.rnr_until = Some(now.saturating_add(wait));
            self.tx_psn = self.una;
            self.rto_deadline = None;
        } else if packet.syndrome == NAK_PSN_SEQUENCE_ERROR {
            self.tx_psn = self.una; // go back N
        } else {
            let at = self.op_at(psn).unwrap_or(0);
            self.fail(at, WcStatus::of_nak(packet.syndrome));
        }
    }

    /// Everything before `new_una` arrived (unless READ responses are missing: implied NAK).
    fn acknowledge(&mut self, now: u64, mut new_una: u32) {
        for op in &self.sq {
            if psn_diff(new_una, op.first_psn) <= 0 {
                break;
            }
            let missing = op.missing_psn();
            if op.is_read() && psn_diff(new_una, missing) > 0 {
                new_una = missing; // the responses this ACK skipped are lost: ask again
                self.tx_psn = missing;
                break;
            }
        }
        if psn_diff(new_una, self.una) <= 0 {
            return;
        }
        self.una = new_una;
        self.catch_up_tx();
        self.retries_left = self.config.retry_cnt;
        self.rnr_left = self.config.rnr_retry;
        while let Some(head) = self.sq.front() {
            if !self.is_done(head) {
                break;
            }
            if let Some(error) = head.error {
                self.fail(0, error);
                return;
            }
            let Some(op) = self.pop_front() else { break };
            let end = op.end_psn();
            if psn_diff(end, self.una) > 0 {
                self.una = end;
            }
            if op.wr.signaled {
                let wc = op.wr.opcode.completion();
                self.complete(op.wr.wr_id, WcStatus::Success, wc, op.wr.length, None);
            }
        }
        self.catch_up_tx();
        self.rto_deadline = if self.una != self.tx_psn {
            Some(now.saturating_add(self.config.timeout_ns))
        } else {
            None
        };
    }

    /// `tx_psn` never lags `una`.
    fn catch_up_tx(&mut self) {
        if psn_diff(self.tx_psn, self.una) < 0 {
            self.tx_psn = self.una;
        }
    }

    /// Ask again for the READ `sq[at]`'s responses from the first missing one (once per gap).
    fn rerequest(&mut self, at: usize) {
        let tx_psn = self.tx_psn;
        let Some(op) = self.sq.get_mut(at) else {
            return;
        };
        let missing = op.missing_psn();
        if op.rerequested_at != Some(missing) && psn_diff(tx_psn, missing) > 0 {
            op.rerequested_at = Some(missing); // later strays of the old stream are ignored
            self.tx_psn = missing;
        }
    }

    fn is_done(&self, op: &SendOp<W>) -> bool {
        if op.error.is_some() {
            return true; // its turn has come: it fails
        }
        if op.is_read() {
            return op.read_received == op.npkts;
        }
        u64::try_from(psn_diff(self.una, op.first_psn)).is_ok_and(|acked| acked >= op.npkts)
    }

    fn on_read_response<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        packet: &Packet,
        payload: &[u8],
        memory: &mut M,
    ) {
        let psn = packet.psn & PSN_MASK;
        let Some(at) = self.op_at(psn) else {
            self.counters.duplicate_packets += 1;
            return;
        };
        let op = &self.sq[at];
        // A WR that failed its local check was never sent: a response for it answers nothing.
        if !op.is_read() || op.error.is_some() {
            self.counters.duplicate_packets += 1;
            return;
        }
        let index = u64::try_from(psn_diff(psn, op.first_psn)).unwrap_or(0);
        if index < op.read_received {
            self.counters.duplicate_packets += 1;
            return;
        }
        // Responses come in PSN order: one that skips an earlier READ's response is a gap there.
        if let Some(earlier) = self.sq.iter().take(at).position(|e| e.read_pending()) {
            self.rerequest(earlier);
            return;
        }
        if index > op.read_received {
            self.rerequest(at);
            return;
        }
        if payload.len() != self.config.chunk_len(op.wr.length, index) {
            self.counters.malformed_packets += 1; // not the length this response must have: wait
            return;
        }
        if let (Some(window), false) = (&op.local, payload.is_empty()) {
            memory.write(window, self.config.offset(index), payload);
        }
        self.sq[at].read_received += 1;
        self.acknowledge(now, psn_add(psn, 1));
    }

    // --- responder -------------------------------------------------------------------------------

    /// Queue an ACK or NAK; a newer one replaces an ACK still waiting at the tail.
    fn reply(&mut self, syndrome: u8, psn: u32) {
        if matches!(
            self.out.back(),
            Some(Response::Reply {
                syndrome: SYNDROME_ACK,
                ..
            })
        ) {
            self.out.pop_back();
        }
        push_small(
            &mut self.out,
            Response::Reply {
                psn,
                syndrome,
                msn: self.msn,
            },
        );
        if syndrome != SYNDROME_ACK {
            self.counters.naks_sent += 1;
        }
    }

    /// The head of the responder's output into `out` (an ACK/NAK, or the next response of a READ); false
    /// if there is none.
    fn next_response<M: Memory<Window = W>>(&mut self, memory: &mut M, out: &mut Packet) -> bool {
        reset(out, self.remote_qpn, 0);
        let mtu = u64::from(self.config.mtu);
        let msn = self.msn;
        match self.out.front_mut() {
            None => return false,
            Some(&mut Response::Reply { psn, syndrome, msn }) => {
                out.opcode = opcode::ACK;
                out.psn = psn;
                out.syndrome = syndrome;
                out.msn = msn;
                if syndrome == SYNDROME_ACK {
                    self.counters.acks_sent += 1;
                }
                self.out.pop_front();
            }
            Some(Response::Read(job)) => {
                let index = job.next_index;
                job.next_index += 1;
                out.opcode = if job.npkts == 1 {
                    opcode::READ_RESPONSE_ONLY
                } else if index == 0 {
                    opcode::READ_RESPONSE_FIRST
                } else if index + 1 == job.npkts {
                    opcode::READ_RESPONSE_LAST
                } else {
                    opcode::READ_RESPONSE_MIDDLE
                };
                out.psn = psn_add(job.first_psn, psn_steps(index));
                out.syndrome = SYNDROME_ACK;
                out.msn = msn;
                let offset = index.saturating_mul(mtu);
                let len = usize::try_from(job.len.saturating_sub(offset).min(mtu)).unwrap_or(0);
                if let (Some(window), true) = (&job.view, len > 0) {
                    memory.read(window, offset, len, &mut out.payload);
                }
                if job.next_index >= job.npkts {
                    self.out.pop_front();
                }
            }
        }
        self.count_sent(out);
        true
    }

    fn on_request<M: Memory<Window = W>>(
        &mut self,
        now: u64,
        packet: &Packet,
        payload: &[u8],
        memory: &mut M,
    ) {
        let psn = packet.psn & PSN_MASK;
        let distance = psn_diff(psn, self.epsn);
        if distance > 0 {
            if !self.nak_sent && self.hold(packet, payload, distance) {
                if self.hold_deadline.is_none() {
                    self.hold_deadline = Some(now.saturating_add(self.reorder_wait()));
                }
                return;
            }
            if !self.nak_sent {
                self.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                self.reply(NAK_PSN_SEQUENCE_ERROR, self.epsn);
            }
            return;
        }
        if distance < 0 {
            self.counters.duplicate_packets += 1;
            if packet.opcode == opcode::READ_REQUEST {
                self.repeat_read(packet, psn, memory);
            } else {
                self.reply(SYNDROME_ACK, psn_add(self.epsn, -1));
            }
            return;
        }
        self.execute(packet, payload, psn, memory);
        // the requests held behind this one, each in turn while the one before it was accepted
        let mut done = psn;
        while !self.held.is_empty() {
            if self.epsn != psn_add(done, 1) {
                self.held.clear(); // refused (RNR, error): the requester sends them again
                break;
            }
            let Some(next) = self.held.pop_front().flatten() else {
                break;
            };
            done = next.psn & PSN_MASK;
            self.execute(&next, &next.payload, done, memory);
        }
        // What is left ends in a held request (`hold` fills the slot it grows the queue to, and the queue only
        // loses its front): another gap is open behind what was executed, and its wait starts now.
        self.hold_deadline =
            (!self.held.is_empty()).then(|| now.saturating_add(self.reorder_wait()));
    }

    /// How long a gap may stay open before it is NAKed.
    fn reorder_wait(&self) -> u64 {
        match self.config.reorder_wait_ns {
            0 => (self.config.timeout_ns / REORDER_WAIT).max(1),
            wait => wait,
        }
    }

    /// Execute the request at the expected PSN.
    fn execute<M: Memory<Window = W>>(
        &mut self,
        packet: &Packet,
        payload: &[u8],
        psn: u32,
        memory: &mut M,
    ) {
        self.nak_sent = false;
        match packet.opcode {
            opcode::READ_REQUEST => self.execute_read(packet, psn, memory),
            opcode::WRITE_FIRST..=opcode::WRITE_ONLY_IMM => {
                self.execute_write(packet, payload, psn, memory)
            }
            _ => self.execute_send(packet, payload, psn, memory),
        }
    }

    /// Hold a request `distance` PSNs ahead of the expected one, if [`RcConfig::reorder`] has room for it;
    /// false if not (the caller NAKs). A copy of one already held is a duplicate.
    fn hold(&mut self, packet: &Packet, payload: &[u8], distance: i32) -> bool {
        let Ok(slot) = usize::try_from(distance - 1) else {
            return false;
        };
        if slot >= self.config.reorder as usize {
            return false;
        }
        if self.held.len() <= slot {
            self.held.resize(slot + 1, None);
        }
        match self.held.get_mut(slot) {
            Some(Some(_)) => self.counters.duplicate_packets += 1,
            Some(free) => {
                let mut copy = packet.clone();
                copy.payload = payload.to_vec();
                *free = Some(copy);
                self.counters.reordered_packets += 1;
            }
            None => return false,
        }
        true
    }

    /// An in-order request packet was executed: advance, and ACK if asked.
    fn accept(&mut self, psn: u32, ack_req: bool, message_done: bool) {
        self.epsn = psn_add(self.epsn, 1);
        if message_done {
            self.msn = (self.msn + 1) & PSN_MASK;
            self.inbound = None;
        }
        if ack_req {
            self.reply(SYNDROME_ACK, psn);
        }
    }

    /// NAK the request, then the QP is in error (as IB's responder goes).
    ///
    /// What it owed for earlier requests (READ responses, ACKs) still goes out first: the requester
    /// completes those before it sees the NAK.
    fn responder_error(&mut self, syndrome: u8, psn: u32) {
        self.reply(syndrome, psn);
        self.enter_error(true);
    }

    fn rnr(&mut self, psn: u32) {
        self.counters.rnr_naks_sent += 1;
        self.nak_sent = true; // later packets of the burst are dropped until this PSN comes again
        self.reply(
            SYNDROME_RNR_NAK | rnr_timer_code(self.config.rnr_timer_ns),
            psn,
        );
    }

    fn execute_write<M: Memory<Window = W>>(
        &mut self,
        packet: &Packet,
        payload: &[u8],
        psn: u32,
        memory: &mut M,
    ) {
        use opcode::*;
        let op = packet.opcode;
        let needs_recv = matches!(op, WRITE_ONLY_IMM | WRITE_LAST_IMM);
        let mut inbound = if matches!(op, WRITE_FIRST | WRITE_ONLY | WRITE_ONLY_IMM) {
            if self.inbound.is_some() {
                self.responder_error(NAK_INVALID_REQUEST, psn);
                return;
            }
            if needs_recv && self.rq.is_empty() {
                self.rnr(psn);
                return;
            }
            let len = u64::from(packet.dma_len);
            let Ok(view) = self.window(memory, packet, len, true) else {
                self.responder_error(NAK_REMOTE_ACCESS_ERROR, psn);
                return;
            };
            Inbound {
                kind: InboundKind::Write,
                view,
                len,
                offset: 0,
            }
        } else {
            match self.inbound.take() {
                Some(current) if current.kind == InboundKind::Write => {
                    if needs_recv && self.rq.is_empty() {
                        self.inbound = Some(current);
                        self.rnr(psn);
                        return;
                    }
                    current
                }
                other => {
                    self.inbound = other; // a SEND's receive is flushed with the error
                    self.responder_error(NAK_INVALID_REQUEST, psn);
                    return;
                }
            }
        };
        let end = inbound.offset.saturating_add(payload.len() as u64);
        let last = !matches!(op, WRITE_FIRST | WRITE_MIDDLE);
        if end > inbound.len || (last && end != inbound.len) {
            self.responder_error(NAK_INVALID_REQUEST, psn); // a WRITE holds no receive to flush
            return;
        }
        write_at(memory, &inbound, payload);
        inbound.offset = end;
        self.inbound = Some(inbound);
        if needs_recv {
            if let Some(recv) = self.rq.pop_front() {
                let wc = WcOpcode::RecvRdmaWithImm;
                self.complete(recv.wr_id, WcStatus::Success, wc, end, Some(packet.imm));
            }
        }
        self.accept(psn, packet.ack_req, last);
    }

    fn execute_send<M: Memory<Window = W>>(
        &mut self,
        packet: &Packet,
        payload: &[u8],
        psn: u32,
        memory: &mut M,
    ) {
        use opcode::*;
        let op = packet.opcode;
        let (mut inbound, posted) = if matches!(op, SEND_FIRST | SEND_ONLY | SEND_ONLY_IMM) {
            if self.inbound.is_some() {
                self.responder_error(NAK_INVALID_REQUEST, psn);
                return;
            }
            let Some(recv) = self.rq.pop_front() else {
                self.rnr(psn);
                return;
            };
            let view = if recv.length > 0 {
                match memory.local(recv.lkey, recv.addr, recv.length, true) {
                    Ok(window) => Some(window),
                    Err(AccessError) => {
                        self.complete(recv.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, 0, None);
                        self.responder_error(NAK_REMOTE_OPERATIONAL_ERROR, psn);
                        return;
                    }
                }
            } else {
                None
            };
            let inbound = Inbound {
                kind: InboundKind::Send(recv),
                view,
                len: recv.length,
                offset: 0,
            };
            (inbound, recv)
        } else {
            let continues = matches!(op, SEND_MIDDLE | SEND_LAST | SEND_LAST_IMM);
            match self.inbound.take() {
                Some(current) if continues => match current.kind {
                    InboundKind::Send(recv) => (current, recv),
                    InboundKind::Write => {
                        self.inbound = Some(current);
                        self.responder_error(NAK_INVALID_REQUEST, psn);
                        return;
                    }
                },
                other => {
                    self.inbound = other; // its receive, if any, is flushed with the error
                    self.responder_error(NAK_INVALID_REQUEST, psn);
                    return;
                }
            }
        };
        let end = inbound.offset.saturating_add(payload.len() as u64);
        if end > inbound.len {
            // The receive completes with the length error here, not flushed with the rest.
            self.complete(posted.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0, None);
            self.responder_error(NAK_INVALID_REQUEST, psn);
            return;
        }
        write_at(memory, &inbound, payload);
        inbound.offset = end;
        self.inbound = Some(inbound);
        let last = matches!(op, SEND_LAST | SEND_LAST_IMM | SEND_ONLY | SEND_ONLY_IMM);
        if last {
            let imm = opcode::has_imm(op).then_some(packet.imm);
            self.complete(posted.wr_id, WcStatus::Success, WcOpcode::Recv, end, imm);
        }
        self.accept(psn, packet.ack_req, last);
    }

    /// The remote window a request packet's RETH names, `len` bytes of it (none for zero bytes).
    fn window<M: Memory<Window = W>>(
        &self,
        memory: &mut M,
        packet: &Packet,
        len: u64,
        write: bool,
    ) -> Result<Option<W>, AccessError> {
        if len == 0 {
            return Ok(None);
        }
        memory.remote(packet.rkey, packet.va, len, write).map(Some)
    }

    fn execute_read<M: Memory<Window = W>>(&mut self, packet: &Packet, psn: u32, memory: &mut M) {
        // More READ requests owed at once than a requester with our settings can have outstanding
        // (max_rd_atomic WRs, a large one asked for in up to a window of chunks): the responder's
        // resources are exhausted (IBTA: invalid request), so a peer cannot make it queue without bound.
        let reads = self
            .out
            .iter()
            .filter(|entry| matches!(entry, Response::Read(_)))
            .count() as u64;
        let owed = u64::from(self.config.max_rd_atomic) + u64::from(self.config.max_inflight);
        if self.inbound.is_some() || reads >= owed {
            self.responder_error(NAK_INVALID_REQUEST, psn);
            return;
        }
        let len = u64::from(packet.dma_len);
        let npkts = self.config.packets(len);
        if self.queue_read(packet, psn, len, npkts, memory) {
            self.msn = (self.msn + 1) & PSN_MASK;
            self.epsn = psn_add(self.epsn, psn_steps(npkts));
        }
    }

    /// A READ asked again (its responses were lost): answer again from that PSN.
    fn repeat_read<M: Memory<Window = W>>(&mut self, packet: &Packet, psn: u32, memory: &mut M) {
        self.out.retain_mut(|entry| match entry {
            Response::Read(job) => {
                let remaining = i64::from(psn_diff(psn, job.first_psn));
                match u64::try_from(remaining) {
                    Ok(remaining) if remaining > job.next_index => {
                        job.npkts = job.npkts.min(remaining);
                        true
                    }
                    _ => false, // the re-request supersedes what this job had left
                }
            }
            Response::Reply { psn: at, .. } => psn_diff(*at, psn) < 0,
        });
        // Never answer PSNs this responder has not accepted as new: a re-request may reach over a later
        // request that was lost.
        let accepted = u64::try_from(psn_diff(self.epsn, psn)).unwrap_or(0);
        let npkts = self.config.packets(u64::from(packet.dma_len)).min(accepted);
        let len = u64::from(packet.dma_len).min(npkts.saturating_mul(u64::from(self.config.mtu)));
        self.queue_read(packet, psn, len, npkts, memory);
    }

    /// Queues the READ responses of `len` bytes in `npkts` packets from `psn`; whether the request's window
    /// of memory was granted (if not, the responder's error is queued instead).
    fn queue_read<M: Memory<Window = W>>(
        &mut self,
        packet: &Packet,
        psn: u32,
        len: u64,
        npkts: u64,
        memory: &mut M,
    ) -> bool {
        let Ok(view) = self.window(memory, packet, len, false) else {
            self.responder_error(NAK_REMOTE_ACCESS_ERROR, psn);
            return false;
        };
        push_small(
            &mut self.out,
            Response::Read(ReadJob {
                first_psn: psn,
                next_index: 0,
                npkts,
                view,
                len,
            }),
        );
        true
    }

    // --- completions and errors --------------------------------------------------------------------

    fn complete(
        &mut self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u64,
        imm: Option<u32>,
    ) {
        push_small(
            &mut self.completions,
            Completion {
                wr_id,
                status,
                opcode,
                qp_num: self.qpn,
                byte_len,
                imm,
                timestamp: 0,
            },
        );
    }

    /// Removes the oldest WR of the send queue, keeping `tx_op` on the same WR.
    fn pop_front(&mut self) -> Option<SendOp<W>> {
        let op = self.sq.pop_front()?;
        self.tx_op = self.tx_op.and_then(|at| at.checked_sub(1));
        Some(op)
    }

    /// `sq[at]` failed with `status`: flush what is before it, complete it, flush the rest.
    ///
    /// Completions stay in posting order, as verbs promises.
    fn fail(&mut self, at: usize, status: WcStatus) {
        for _ in 0..at {
            if let Some(earlier) = self.pop_front() {
                self.flush(&earlier.wr);
            }
        }
        if let Some(op) = self.pop_front() {
            let wc = op.wr.opcode.completion();
            self.complete(op.wr.wr_id, status, wc, 0, None);
        }
        self.enter_error(false);
    }

    fn flush(&mut self, wr: &SendWr) {
        self.complete(
            wr.wr_id,
            WcStatus::WrFlushErr,
            wr.opcode.completion(),
            0,
            None,
        );
    }

    /// The QP is in ERROR: every WR and receive completes flushed; `keep_output` keeps the replies already
    /// queued (the NAK that explains the error still goes out), READ responses go either way.
    fn enter_error(&mut self, keep_output: bool) {
        self.state = QpState::Error;
        self.held.clear();
        self.hold_deadline = None;
        self.rto_deadline = None;
        self.rnr_until = None;
        while let Some(op) = self.pop_front() {
            self.flush(&op.wr);
        }
        if let Some(InboundKind::Send(recv)) = self.inbound.take().map(|inbound| inbound.kind) {
            self.complete(recv.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
        }
        while let Some(recv) = self.rq.pop_front() {
            self.complete(recv.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None);
        }
        if !keep_output {
            self.out
                .retain(|entry| matches!(entry, Response::Reply { .. }));
        }
    }
}

/// Copies `payload` into the inbound message's buffer at its offset.
fn write_at<M: Memory>(memory: &mut M, inbound: &Inbound<M::Window>, payload: &[u8]) {
    if let (Some(window), false) = (&inbound.view, payload.is_empty()) {
        memory.write(window, inbound.offset, payload);
    }
}

/// A send work request's local buffer, checked (a READ's is written): its window, or the status it completes
/// with (longer than `max_msg`: LOC_LEN_ERR; a key, bound or permission refused: LOC_PROT_ERR). A zero-length
/// request is checked against nothing, as in verbs.
pub fn local_buffer<M: Memory>(
    memory: &mut M,
    wr: &SendWr,
    max_msg: u64,
) -> (Option<M::Window>, Option<WcStatus>) {
    if wr.length > max_msg {
        return (None, Some(WcStatus::LocLenErr));
    }
    if wr.length == 0 {
        return (None, None);
    }
    let write = wr.opcode == WrOpcode::RdmaRead;
    match memory.local(wr.lkey, wr.addr, wr.length, write) {
        Ok(window) => (Some(window), None),
        Err(AccessError) => (None, Some(WcStatus::LocProtErr)),
    }
}

/// A RETH DMA length: 32 bits on the wire (a longer message cannot be described; saturate).
fn dma_len(length: u64) -> u32 {
    u32::try_from(length).unwrap_or(u32::MAX)
}

/// Clears `out` for a new packet to `dest_qp` at `psn`, keeping its payload buffer.
fn reset(out: &mut Packet, dest_qp: u32, psn: u32) {
    let mut payload = std::mem::take(&mut out.payload);
    payload.clear();
    *out = Packet::new(0, dest_qp, psn);
    out.payload = payload;
}

/// Flat test memory for the transports' tests (RC's and UET's).
#[cfg(test)]
pub(crate) mod test_memory {
    use super::{AccessError, Memory};

    pub const KEY: u32 = 1;
    /// A second region right after the first, readable only (remote READ), for protection errors.
    pub const READ_ONLY_KEY: u32 = 2;
    pub const REGION: u64 = 1 << 16;
    /// Flat memory: `KEY` is `[0, REGION)` with every access, `READ_ONLY_KEY` is `[REGION, 2 REGION)`.
    pub struct Flat(pub Vec<u8>);

    impl Flat {
        pub fn new(seed: u8) -> Self {
            Flat(
                (0..2 * REGION)
                    .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                    .collect(),
            )
        }

        pub fn at(&self, addr: u64, len: u64) -> &[u8] {
            &self.0[addr as usize..(addr + len) as usize]
        }

        fn check(
            &self,
            key: u32,
            addr: u64,
            length: u64,
            write: bool,
        ) -> Result<(u64, u64), AccessError> {
            let (start, allowed) = match key {
                KEY => (0, true),
                READ_ONLY_KEY => (REGION, !write),
                _ => return Err(AccessError),
            };
            let end = addr.checked_add(length).ok_or(AccessError)?;
            if !allowed || addr < start || end > start + REGION {
                return Err(AccessError);
            }
            Ok((addr, length))
        }
    }

    impl Memory for Flat {
        type Window = (u64, u64);

        fn local(
            &mut self,
            lkey: u32,
            addr: u64,
            length: u64,
            write: bool,
        ) -> Result<(u64, u64), AccessError> {
            self.check(lkey, addr, length, write)
        }

        fn remote(
            &mut self,
            rkey: u32,
            addr: u64,
            length: u64,
            write: bool,
        ) -> Result<(u64, u64), AccessError> {
            self.check(rkey, addr, length, write)
        }

        fn read(&mut self, window: &(u64, u64), offset: u64, len: usize, out: &mut Vec<u8>) {
            assert!(offset + len as u64 <= window.1, "read past the window");
            let start = (window.0 + offset) as usize;
            out.extend_from_slice(&self.0[start..start + len]);
        }

        fn write(&mut self, window: &(u64, u64), offset: u64, data: &[u8]) {
            assert!(
                offset + data.len() as u64 <= window.1,
                "write past the window"
            );
            let start = (window.0 + offset) as usize;
            self.0[start..start + data.len()].copy_from_slice(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use super::test_memory::{Flat, KEY, READ_ONLY_KEY, REGION};
    const QPN_A: u32 = 0x11;
    const QPN_B: u32 = 0x2A;
    const PSN_A: u32 = 0xFF_FFF0; // wraps the PSN space within a few packets
    const PSN_B: u32 = 0x5000;

    /// Two connected QPs with their memories, and what crossed the wire.
    struct Net {
        qps: [RcQueuePair<(u64, u64)>; 2],
        memory: [Flat; 2],
        now: u64,
        sent: Vec<(usize, Packet)>,
    }

    impl Net {
        fn new(config: RcConfig) -> Self {
            let mut a = RcQueuePair::new(QPN_A, config, PSN_A);
            let mut b = RcQueuePair::new(QPN_B, config, PSN_B);
            a.connect(QPN_B, PSN_B).unwrap();
            b.connect(QPN_A, PSN_A).unwrap();
            Net {
                qps: [a, b],
                memory: [Flat::new(1), Flat::new(2)],
                now: 0,
                sent: Vec::new(),
            }
        }

        fn post(&mut self, side: usize, wr: SendWr) {
            let [a, b] = &mut self.memory;
            let memory = if side == 0 { a } else { b };
            self.qps[side].post_send(memory, wr).unwrap();
        }

        /// Until both are quiet: every packet delivered at once unless `drop` says so, timers run when idle.
        fn run(&mut self, mut drop: impl FnMut(usize, &Packet) -> bool) {
            for _ in 0..100_000 {
                let mut moved = false;
                for side in 0..2 {
                    let mut packet = Packet::default();
                    let [a, b] = &mut self.memory;
                    let (mine, theirs) = if side == 0 { (a, b) } else { (b, a) };
                    if self.qps[side].next_packet(self.now, true, mine, &mut packet) {
                        moved = true;
                        self.sent.push((side, packet.clone()));
                        if !drop(side, &packet) {
                            self.qps[1 - side].receive(self.now, &packet, theirs);
                        }
                    }
                }
                if moved {
                    self.now += 1_000;
                    continue;
                }
                let Some(deadline) = self.qps.iter().filter_map(|qp| qp.next_deadline()).min()
                else {
                    return;
                };
                self.now = self.now.max(deadline);
                for qp in &mut self.qps {
                    qp.on_timer(self.now);
                    assert!(qp.next_deadline().is_none_or(|d| d > self.now));
                }
            }
            panic!("not settled");
        }

        fn results(&mut self, side: usize) -> Vec<(u64, WcStatus)> {
            self.qps[side]
                .poll_completions(None)
                .map(|c| (c.wr_id, c.status))
                .collect()
        }
    }

    fn write(wr_id: u64, addr: u64, remote_addr: u64, length: u64) -> SendWr {
        SendWr {
            wr_id,
            opcode: WrOpcode::RdmaWrite,
            addr,
            length,
            lkey: KEY,
            remote_addr,
            rkey: KEY,
            imm: 0,
            signaled: true,
        }
    }

    fn read(wr_id: u64, addr: u64, remote_addr: u64, length: u64) -> SendWr {
        SendWr {
            opcode: WrOpcode::RdmaRead,
            ..write(wr_id, addr, remote_addr, length)
        }
    }

    #[test]
    fn a_write_of_several_mtus_lands_byte_exact() {
        let mut net = Net::new(RcConfig::default());
        let length = 5 * 1024 + 100;
        net.post(0, write(1, 0x100, 0x2000, length));
        net.run(|_, _| false);
        assert_eq!(
            net.memory[1].at(0x2000, length),
            net.memory[0].at(0x100, length)
        );
        assert_eq!(net.results(0), [(1, WcStatus::Success)]);
        let requests: Vec<u8> = net
            .sent
            .iter()
            .filter(|(s, _)| *s == 0)
            .map(|(_, p)| p.opcode)
            .collect();
        use opcode::*;
        assert_eq!(
            requests,
            [
                WRITE_FIRST,
                WRITE_MIDDLE,
                WRITE_MIDDLE,
                WRITE_MIDDLE,
                WRITE_MIDDLE,
                WRITE_LAST
            ]
        );
        let first = &net.sent[0].1;
        assert_eq!(
            (first.psn, first.va, first.rkey, first.dma_len),
            (PSN_A, 0x2000, KEY, length as u32)
        );
        assert_eq!(net.qps[0].counters().packets_sent, 6);
        assert_eq!(net.qps[0].una(), psn_add(PSN_A, 6));
    }

    /// A's requests for one WRITE of 8 packets and a SEND, pulled off the wire and delivered to B in the
    /// order `order` gives (indices into the requests); then both run until quiet.
    fn deliver_reordered(config: RcConfig, order: &[usize]) -> Net {
        let mut net = Net::new(config);
        let length = 8 * 1024;
        net.post(0, write(1, 0x100, 0x2000, length));
        net.post(
            0,
            SendWr {
                opcode: WrOpcode::Send,
                ..write(2, 0x300, 0, 100)
            },
        );
        net.qps[1].post_recv(RecvWr {
            wr_id: 9,
            addr: 0x8000,
            length: 100,
            lkey: KEY,
        });
        let mut requests = Vec::new();
        let mut packet = Packet::default();
        while net.qps[0].next_packet(net.now, true, &mut net.memory[0], &mut packet) {
            requests.push(packet.clone());
        }
        assert_eq!(requests.len(), 9);
        for &index in order {
            net.qps[1].receive(net.now, &requests[index], &mut net.memory[1]);
        }
        net.run(|_, _| false);
        assert_eq!(
            net.memory[1].at(0x2000, length),
            net.memory[0].at(0x100, length)
        );
        assert_eq!(net.memory[1].at(0x8000, 100), net.memory[0].at(0x300, 100));
        assert_eq!(
            net.results(0),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        net
    }

    #[test]
    fn requests_held_past_a_gap_land_without_a_nak_or_a_resend() {
        let order = [0, 8, 3, 2, 1, 7, 5, 6, 4];
        let held = deliver_reordered(
            RcConfig {
                reorder: 8,
                ..RcConfig::default()
            },
            &order,
        );
        let b = held.qps[1].counters();
        assert_eq!((b.naks_sent, b.duplicate_packets), (0, 0));
        assert_eq!(b.reordered_packets, 6); // all but PSNs 0, 1 and 4 came ahead of a gap
        assert_eq!(held.qps[0].counters().retransmitted_packets, 0);
        // without the hold, the first packet past the gap is NAKed and the rest sent again
        let naked = deliver_reordered(RcConfig::default(), &order);
        assert_eq!(naked.qps[1].counters().seq_naks_sent, 2); // PSN 8, then PSN 7 after 1 came
        assert!(naked.qps[0].counters().retransmitted_packets > 0);
        assert_eq!(naked.qps[1].counters().reordered_packets, 0);
    }

    #[test]
    fn a_gap_that_stays_open_is_naked_after_the_hold_wait() {
        let config = RcConfig {
            reorder: 8,
            ..RcConfig::default()
        };
        let mut net = Net::new(config);
        net.post(0, write(1, 0x100, 0x2000, 4 * 1024));
        let mut requests = Vec::new();
        let mut packet = Packet::default();
        while net.qps[0].next_packet(net.now, true, &mut net.memory[0], &mut packet) {
            requests.push(packet.clone());
        }
        for request in &requests[1..] {
            net.qps[1].receive(net.now, request, &mut net.memory[1]); // PSN 0 was lost
        }
        let wait = config.timeout_ns / REORDER_WAIT;
        assert_eq!(net.qps[1].next_deadline(), Some(net.now + wait));
        assert_eq!(net.qps[1].counters().naks_sent, 0);
        net.qps[1].on_timer(net.now + wait);
        assert_eq!(net.qps[1].counters().seq_naks_sent, 1);
        net.now += wait;
        net.run(|_, _| false); // the NAK goes back; the requester resends from PSN 0 long before its timeout
        assert_eq!(net.results(0), [(1, WcStatus::Success)]);
        assert!(
            net.now < config.timeout_ns,
            "recovered by the NAK, not the requester's timeout"
        );
        assert_eq!(
            net.memory[1].at(0x2000, 4096),
            net.memory[0].at(0x100, 4096)
        );
    }

    #[test]
    fn a_request_past_the_hold_is_naked_and_a_copy_held_is_a_duplicate() {
        let config = RcConfig {
            reorder: 4,
            ..RcConfig::default()
        };
        let copied = deliver_reordered(config, &[2, 2, 1, 0, 3, 4, 5, 6, 7, 8]);
        let b = copied.qps[1].counters();
        assert_eq!(
            (b.duplicate_packets, b.reordered_packets, b.naks_sent),
            (1, 2, 0)
        );
        let past = deliver_reordered(config, &[1, 8, 0, 2, 3, 4, 5, 6, 7]);
        let b = past.qps[1].counters();
        assert_eq!((b.seq_naks_sent, b.reordered_packets), (1, 1)); // PSN 8 is 8 ahead: past the 4 held
    }

    #[test]
    fn read_and_send_with_immediate_complete_on_both_sides() {
        let mut net = Net::new(RcConfig {
            mtu: 256,
            ..RcConfig::default()
        });
        net.qps[1].post_recv(RecvWr {
            wr_id: 9,
            addr: 0x8000,
            length: 1000,
            lkey: KEY,
        });
        net.post(0, read(1, 0x4000, 0x6000, 3000));
        net.post(
            0,
            SendWr {
                opcode: WrOpcode::SendWithImm,
                imm: 77,
                ..write(2, 0x100, 0, 600)
            },
        );
        net.run(|_, _| false);
        assert_eq!(
            net.results(0),
            [(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        let received: Vec<Completion> = net.qps[1].poll_completions(None).collect();
        assert_eq!(received.len(), 1);
        assert_eq!(
            (
                received[0].wr_id,
                received[0].opcode,
                received[0].byte_len,
                received[0].imm
            ),
            (9, WcOpcode::Recv, 600, Some(77))
        );
        assert_eq!(
            net.memory[0].at(0x4000, 3000),
            net.memory[1].at(0x6000, 3000)
        );
        assert_eq!(net.memory[1].at(0x8000, 600), net.memory[0].at(0x100, 600));
    }

    #[test]
    fn a_lost_packet_is_recovered_by_go_back_n() {
        let mut net = Net::new(RcConfig::default());
        let lost = psn_add(PSN_A, 3);
        let mut dropped = false;
        net.post(0, write(1, 0, 0x1000, 10 * 1024));
        net.run(|side, p| {
            let drop = side == 0 && p.psn == lost && !dropped;
            dropped |= drop;
            drop
        });
        assert_eq!(net.results(0), [(1, WcStatus::Success)]);
        assert_eq!(
            net.memory[1].at(0x1000, 10 * 1024),
            net.memory[0].at(0, 10 * 1024)
        );
        assert_eq!(net.qps[1].counters().seq_naks_sent, 1);
        assert!(net.qps[0].counters().retransmitted_packets >= 1);
    }

    #[test]
    fn retries_run_out_on_a_dead_link() {
        let config = RcConfig {
            retry_cnt: 2,
            timeout_ns: 1_000_000,
            ..RcConfig::default()
        };
        let mut net = Net::new(config);
        net.post(0, write(1, 0, 0, 100));
        net.post(0, write(2, 0, 0, 100));
        net.run(|side, _| side == 0);
        assert_eq!(
            net.results(0),
            [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!(net.qps[0].counters().timeouts, 3);
        assert_eq!(net.qps[0].state(), QpState::Error);
    }

    #[test]
    fn a_send_without_a_receive_exhausts_rnr_retries() {
        let mut net = Net::new(RcConfig {
            rnr_retry: 1,
            ..RcConfig::default()
        });
        net.post(
            0,
            SendWr {
                opcode: WrOpcode::Send,
                ..write(1, 0, 0, 10)
            },
        );
        net.run(|_, _| false);
        assert_eq!(net.results(0), [(1, WcStatus::RnrRetryExcErr)]);
        assert_eq!(net.qps[1].counters().rnr_naks_sent, 2);
    }

    #[test]
    fn remote_and_local_protection_errors() {
        let mut net = Net::new(RcConfig::default());
        net.post(
            0,
            SendWr {
                rkey: READ_ONLY_KEY,
                remote_addr: REGION,
                ..write(1, 0, 0, 100)
            },
        );
        net.post(0, write(2, 0, 0, 100));
        net.run(|_, _| false);
        assert_eq!(
            net.results(0),
            [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!(net.qps[1].state(), QpState::Error);

        let mut net = Net::new(RcConfig::default());
        net.post(0, read(1, REGION, 0, 100).clone_with_lkey(READ_ONLY_KEY));
        assert_eq!(net.results(0), [(1, WcStatus::LocProtErr)]);
        net.post(0, write(2, 0, 0, 100));
        assert_eq!(net.results(0), [(2, WcStatus::WrFlushErr)]);
    }

    impl SendWr {
        fn clone_with_lkey(self, lkey: u32) -> Self {
            SendWr { lkey, ..self }
        }
    }

    #[test]
    fn verbs_refused_outright() {
        let mut qp: RcQueuePair<(u64, u64)> = RcQueuePair::new(QPN_A, RcConfig::default(), 0);
        let mut memory = Flat::new(0);
        assert_eq!(
            qp.post_send(&mut memory, write(1, 0, 0, 1))
                .unwrap_err()
                .to_string(),
            "QP 17 is not connected"
        );
        qp.connect(1, 0).unwrap();
        assert_eq!(
            qp.connect(1, 0).unwrap_err().to_string(),
            "QP 17 is RTS, not INIT"
        );
    }

    #[test]
    fn config_checks_say_what_is_wrong() {
        let bad_mtu = RcConfig {
            mtu: 1000,
            ..RcConfig::default()
        }
        .validated()
        .unwrap_err();
        assert_eq!(
            bad_mtu.to_string(),
            "path MTU 1000: choose one of 256, 512, 1024, 2048, 4096"
        );
        let zero = RcConfig {
            ack_every: 0,
            ..RcConfig::default()
        }
        .validated()
        .unwrap_err();
        assert_eq!(zero, ConfigError::ZeroWindow);
        let retry = RcConfig {
            rnr_retry: 8,
            ..RcConfig::default()
        }
        .validated()
        .unwrap_err();
        assert_eq!(retry.to_string(), "retry_cnt and rnr_retry are 0 to 7");
        assert!(RcConfig::default().validated().is_ok());
    }

    #[test]
    fn timeouts_and_rnr_codes() {
        assert_eq!(default_timeout_ns(20_000_000, 1024, 128), 4096 << 17); // 537 ms
        assert_eq!(default_timeout_ns(100_000_000, 1024, 128), 4096 << 15); // 134 ms
        assert_eq!(default_timeout_ns(1_000_000_000, 1024, 128), 4096 << 14); // 67 ms
        assert_eq!(default_timeout_ns(0, 4096, u64::MAX), 4096 << 31);
        assert_eq!(rnr_timer_code(1_000_000), 14);
        assert_eq!(rnr_timer_code(0), 1);
        assert_eq!(rnr_timer_code(u64::MAX), 0);
    }

    /// A packet as a decoder could hand it over: any opcode, PSNs near the live ones, keys that work or not.
    fn hostile_packet() -> impl Strategy<Value = (Packet, usize, i64)> {
        (
            (
                any::<u8>(),
                prop::sample::select(vec![0u8, 6, 10, 12, 13, 14, 15, 16, 17]),
            ),
            0usize..4,
            -4i64..24,
            (
                prop::sample::select(vec![KEY, READ_ONLY_KEY, 7]),
                0u64..3 * REGION,
                any::<u64>(),
            ),
            (0u32..5000, any::<u32>()),
            (
                any::<u8>(),
                prop::sample::select(vec![0x1Fu8, 0x20, 0x33, 0x60, 0x61, 0x62, 0x63]),
            ),
            prop::collection::vec(any::<u8>(), 0..1100),
            (any::<bool>(), any::<bool>(), any::<u32>()),
        )
            .prop_map(
                |(
                    (any_op, op),
                    base,
                    delta,
                    (rkey, va, wild_va),
                    (dma, wild_dma),
                    (s1, s2),
                    payload,
                    (ack_req, ce, imm),
                )| {
                    let mut packet = Packet::new(if any_op % 3 == 0 { any_op } else { op }, 0, 0);
                    packet.rkey = rkey;
                    packet.va = if rkey == 7 { wild_va } else { va };
                    packet.dma_len = if dma % 7 == 0 { wild_dma } else { dma };
                    packet.syndrome = if s1 % 2 == 0 { s1 } else { s2 };
                    packet.payload = payload;
                    packet.ack_req = ack_req;
                    packet.ecn_ce = ce;
                    packet.imm = imm;
                    (packet, base, delta)
                },
            )
    }

    #[derive(Clone, Debug)]
    enum Step {
        Post(usize, u8, u64),
        Recv(usize, u64),
        Pull(usize, bool, bool),
        Inject(usize, Packet, usize, i64),
        Time(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0usize..2, 0u8..5, 0u64..3000).prop_map(|(s, k, l)| Step::Post(s, k, l)),
            (0usize..2, 0u64..3000).prop_map(|(s, l)| Step::Recv(s, l)),
            (0usize..2, any::<bool>(), any::<bool>())
                .prop_map(|(s, d, drop)| Step::Pull(s, d, drop)),
            (0usize..2, hostile_packet())
                .prop_map(|(s, (p, base, delta))| Step::Inject(s, p, base, delta)),
            (0u64..5_000_000).prop_map(Step::Time),
        ]
    }

    /// The send completions each QP has, by WR id (the receives left out).
    fn collect_sends(net: &mut Net, completed: &mut [Vec<u64>; 2]) {
        for (qp, ids) in net.qps.iter_mut().zip(completed) {
            let sends = qp
                .poll_completions(None)
                .filter(|c| !matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm));
            ids.extend(sends.map(|c| c.wr_id));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// No sequence of posts, pulls, deliveries, hostile packets and time steps panics, and once the pair
        /// settles every send WR has completed exactly once, in posting order.
        #[test]
        fn no_panic_on_any_packet_sequence(
            mtu in prop::sample::select(vec![256u32, 1024]),
            max_inflight in 1u32..10,
            reorder in prop::sample::select(vec![0u32, 4]),
            steps in prop::collection::vec(step(), 0..80),
        ) {
            let config = RcConfig { mtu, max_inflight, max_rd_atomic: 2, retry_cnt: 1, rnr_retry: 1,
                                    timeout_ns: 1_000_000, max_msg: 2500, reorder, ..RcConfig::default() };
            let mut net = Net::new(config);
            let mut posted = [Vec::new(), Vec::new()];
            let mut completed: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
            for (i, step) in steps.into_iter().enumerate() {
                let wr_id = i as u64;
                let [a, b] = &mut net.memory;
                match step {
                    Step::Post(side, kind, length) => {
                        let opcode = WrOpcode::ALL[usize::from(kind)].1;
                        let wr = SendWr { opcode, ..write(wr_id, 0x100, 0x200, length) };
                        let memory = if side == 0 { a } else { b };
                        net.qps[side].post_send(memory, wr).unwrap();
                        posted[side].push(wr_id);
                    }
                    Step::Recv(side, length) => {
                        net.qps[side].post_recv(RecvWr { wr_id: 1 << 32 | wr_id, addr: 0x4000, length, lkey: KEY });
                    }
                    Step::Pull(side, data, drop) => {
                        let (mine, theirs) = if side == 0 { (a, b) } else { (b, a) };
                        let mut packet = Packet::default();
                        if net.qps[side].next_packet(net.now, data, mine, &mut packet) && !drop {
                            net.qps[1 - side].receive(net.now, &packet, theirs);
                        }
                    }
                    Step::Inject(side, mut packet, base, delta) => {
                        let qp = &net.qps[side];
                        let anchor = [qp.una(), qp.tx_psn(), qp.epsn(), qp.high_psn()][base];
                        packet.psn = psn_add(anchor, delta);
                        packet.dest_qp = qp.qpn();
                        let memory = if side == 0 { a } else { b };
                        net.qps[side].receive(net.now, &packet, memory);
                    }
                    Step::Time(dt) => {
                        net.now += dt;
                        for qp in &mut net.qps {
                            qp.on_timer(net.now);
                        }
                    }
                }
                collect_sends(&mut net, &mut completed);
            }
            net.run(|_, _| false);
            collect_sends(&mut net, &mut completed);
            prop_assert_eq!(completed, posted);
        }
    }
}
