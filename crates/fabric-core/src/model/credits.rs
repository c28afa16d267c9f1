//! IB link-level credit flow control per VL (the Python twin: emulator/model/credits.py).

/// A grown grant goes out at most every 500 us (unless it grew by half the buffer): the emulated agents'
/// budget, not IB's; `--switch fc_floor` sets it (0: frames alone pace the grants).
pub const FABRIC_MIN_INTERVAL_NS: u64 = 500_000;
