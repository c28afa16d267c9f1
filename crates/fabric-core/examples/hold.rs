//! The hold model, the classic event-set benchmark, on fabric-core's engine driven natively on one core.
//!
//! `cargo run --release --example hold -- [EVENTS] [PENDING...]` (defaults: 10000000 events; 1000, 100000 and
//! 1000000 pending). `PENDING` events are outstanding at all times: each, when it runs, schedules one more at a
//! pseudo-random delay of 1 ns to 2^20 ns, the linear congruential sequence `bench/bench_sim_engine.py` uses, until `EVENTS` have run. Prints events/s and ns per event for each queue size, by the
//! wall clock and by the time the process was on a CPU (`/proc/self/schedstat`), which a loaded machine
//! disturbs less. `bench/bench_engine.py` runs it next to the bindings' engine.

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

/// Seconds this process has run on a CPU, if Linux says (`/proc/self/schedstat`: ns on CPU first).
fn on_cpu() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// What one queue size measured.
struct Measured {
    wall: f64,
    cpu: Option<f64>,
    ran: u64,
    entries: usize,
}

/// Runs `events` events with `pending` outstanding.
fn hold(events: u64, pending: u64) -> Measured {
    let mut delays = Delays(12_345);
    let mut engine = Engine::new();
    for _ in 0..pending {
        engine.after(delays.next(), Hold);
    }
    let (began, cpu_began) = (Instant::now(), on_cpu());
    let ran = engine.run(None, Some(events), |engine, Hold| {
        engine.after(delays.next(), Hold);
    });
    let wall = began.elapsed().as_secs_f64();
    let cpu = on_cpu().zip(cpu_began).map(|(end, start)| end - start);
    Measured {
        wall,
        cpu,
        ran,
        entries: engine.entries(),
    }
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
        let Measured {
            wall,
            cpu,
            ran,
            entries,
        } = hold(events, pending);
        let on_cpu = cpu.map_or(String::new(), |cpu| {
            format!(
                "; on CPU {cpu:.3} s: {:.2} M events/s ({:.1} ns per event)",
                ran as f64 / cpu / 1e6,
                cpu / ran as f64 * 1e9
            )
        });
        println!(
            "fabric-core engine (native), {pending} pending: {ran} events in {wall:.3} s: {:.2} M events/s \
             ({:.1} ns per event){on_cpu}; {entries} entries at the end",
            ran as f64 / wall / 1e6,
            wall / ran as f64 * 1e9,
        );
    }
    ExitCode::SUCCESS
}
