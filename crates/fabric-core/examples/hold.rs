//! The hold model, the classic event-set benchmark, on fabric-core's engine driven natively on one core.
//!
//! `cargo run --release --example hold -- [EVENTS] [PENDING...]` (defaults: 10000000 events; 1000, 100000 and
//! 1000000 pending). `PENDING` events are outstanding at all times: each, when it runs, schedules one more at a
//! pseudo-random delay of 1 ns to 2^20 ns, the linear congruential sequence `bench/bench_sim_engine.py` uses
//! for the Python engine, until `EVENTS` have run. Prints events/s and ns per event for each queue size.
//! `bench/bench_engine.py` runs it next to the Python engine.

use std::process::ExitCode;
use std::time::Instant;

use fabric_core::sim::engine::Engine;

const MAX_DELAY_NS: u64 = 1 << 20;

/// The delays of `bench/bench_sim_engine.py`: value = (value * 1103515245 + 12345) mod 2^31, delay = 1 +
/// value mod 2^20.
struct Delays(u64);

impl Delays {
    fn next(&mut self) -> u64 {
        self.0 = (self.0 * 1_103_515_245 + 12_345) & 0x7FFF_FFFF;
        1 + self.0 % MAX_DELAY_NS
    }
}

/// The hold model's one event: nothing to carry, the engine's cost alone is measured.
#[derive(Clone, Copy)]
struct Hold;

/// Runs `events` events with `pending` outstanding; (seconds, events run, entries left).
fn hold(events: u64, pending: u64) -> (f64, u64, usize) {
    let mut delays = Delays(12_345);
    let mut engine = Engine::new();
    for _ in 0..pending {
        engine.after(delays.next(), Hold);
    }
    let began = Instant::now();
    let ran = engine.run(None, Some(events), |engine, Hold| {
        engine.after(delays.next(), Hold);
    });
    (began.elapsed().as_secs_f64(), ran, engine.entries())
}

fn parse(arg: &str) -> Option<u64> {
    arg.parse()
        .ok()
        .filter(|&n| (1..=1_000_000_000).contains(&n))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let numbers: Option<Vec<u64>> = args.iter().map(|arg| parse(arg)).collect();
    let Some(numbers) = numbers else {
        eprintln!("hold: error: arguments are whole numbers from 1 to 1e9: EVENTS [PENDING...]");
        return ExitCode::from(2);
    };
    let events = numbers.first().copied().unwrap_or(10_000_000);
    let sizes = match numbers.get(1..) {
        Some(rest) if !rest.is_empty() => rest.to_vec(),
        _ => vec![1_000, 100_000, 1_000_000],
    };
    for pending in sizes {
        let (seconds, ran, entries) = hold(events, pending);
        println!(
            "fabric-core engine (native): {ran} events in {seconds:.3} s: {:.2} M events/s ({:.1} ns per event), \
             {pending} pending ({entries} entries at the end)",
            ran as f64 / seconds / 1e6,
            seconds / ran as f64 * 1e9,
        );
    }
    ExitCode::SUCCESS
}
