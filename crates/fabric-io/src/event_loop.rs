//! One loop for every agent of a data-plane process: one epoll over all their descriptors, and one timerfd
//! for all their deadlines, kept in a heap. The compiled form of what `emulator/agents/loop.py` did, with its
//! rules:
//!
//! - A batch of ready descriptors is taken agent by agent: each agent's handlers, then at once its
//!   `after_events` (what it sends), not after every other agent's handlers (eight hosts answering late
//!   was measured in Python: docs/performance.md).
//! - A deadline that comes meanwhile is served as soon as the handler or `after_events` running returns,
//!   with what it sends; what runs after goes on at the later time, so no agent's clock runs backwards.
//! - Every due deadline runs before any of their `after_events`: agents whose timed starts fall on one
//!   instant release them together.
//! - An agent that stops is finished (its descriptors leave the epoll) at the end of the batch.
//! - A deadline that must not wait for a wake-up (an agent's [`Agent::spin_ns`]) wakes the loop that long
//!   before it, and the loop then polls its descriptors without sleeping until the deadline has come: a
//!   sleeping thread here wakes 30 to 80 us after its timer.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::io::clock::monotonic_ns;
use crate::io::poll::{Epoll, Ready, TimerFd, READABLE};

/// The longest wait: a stop asked from another thread is seen within this.
const WAIT_MS: i32 = 500;
/// The timerfd's token (agents' tokens are their index above 32 bits, below these two).
const TIMER: u64 = u64::MAX;
/// The stop descriptor's token ([`EventLoop::stop_on`]).
const STOP: u64 = u64::MAX - 1;
/// Ready descriptors taken per wait.
const EVENTS: usize = 256;
/// Deadlines left behind in the heap (an agent moved its own) kept before it is rebuilt from the live ones:
/// an agent that moves its deadline at every frame would otherwise grow it without end.
const HEAP_SLACK: usize = 64;

/// What one agent may change in the loop's epoll: its own descriptors, each reported to it with its token.
pub struct Registry<'a> {
    epoll: &'a Epoll,
    agent: usize,
}

impl Registry<'_> {
    /// Watches `fd` for `events` (`io::poll::READABLE`, `WRITABLE`), reported to the agent as `token`.
    pub fn watch(&self, fd: RawFd, token: u32, events: u32) -> io::Result<()> {
        self.epoll.add(fd, token_of(self.agent, token), events)
    }

    /// Watches `fd` for `events` instead.
    pub fn modify(&self, fd: RawFd, token: u32, events: u32) -> io::Result<()> {
        self.epoll.modify(fd, token_of(self.agent, token), events)
    }

    /// Stops watching `fd`.
    pub fn unwatch(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.remove(fd)
    }
}

/// What the loop asks of an agent (a switch, a host).
pub trait Agent {
    /// A descriptor the agent watches is ready; `token` is the one it watched it with.
    fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>);
    /// Its deadline came (at `deadline`; `now` is later or equal).
    fn deadline(&mut self, deadline: u64, now: u64, registry: &Registry<'_>);
    /// After its events of a batch, or its deadline: what it sends. Returns its next deadline, if any.
    fn after_events(&mut self, now: u64, registry: &Registry<'_>) -> Option<u64>;
    /// Whether it goes on; an agent that stops is finished at the end of the batch.
    fn running(&self) -> bool;
    /// The loop no longer serves it: it takes its descriptors out of the epoll and writes what it must.
    fn finish(&mut self, registry: &Registry<'_>);
    /// How long before its next deadline the loop stops sleeping and watches the clock; 0 (most deadlines):
    /// the timer's wake-up is close enough.
    fn spin_ns(&self) -> u64 {
        0
    }
}

/// The loop of one process.
pub struct EventLoop<A> {
    epoll: Epoll,
    timer: TimerFd,
    agents: Vec<Option<A>>,
    /// Each agent's live deadline; the heap may hold older ones, which are skipped.
    deadlines: Vec<Option<u64>>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    ready: Vec<Ready>,
    /// The deadline the timerfd is armed for (None once it fired): arming it again for the same one is a
    /// system call per batch for nothing.
    armed: Option<u64>,
    /// Set from anywhere (another thread, Python, a readable stop descriptor): every agent ends at the next
    /// look.
    pub stop: Arc<AtomicBool>,
}

impl<A: Agent> EventLoop<A> {
    pub fn new() -> io::Result<EventLoop<A>> {
        let epoll = Epoll::new(EVENTS)?;
        let timer = TimerFd::new()?;
        epoll.add(timer.as_raw_fd(), TIMER, READABLE)?;
        Ok(EventLoop {
            epoll,
            timer,
            agents: Vec::new(),
            deadlines: Vec::new(),
            heap: BinaryHeap::new(),
            ready: Vec::new(),
            armed: None,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Adds an agent; its index, for [`EventLoop::registry`].
    pub fn add(&mut self, agent: A) -> usize {
        self.agents.push(Some(agent));
        self.deadlines.push(None);
        self.agents.len() - 1
    }

    /// Adds the agent `make` builds, given what it may change in the epoll (to watch its first descriptors);
    /// its index, or `make`'s error (then nothing is added).
    pub fn add_with<E>(
        &mut self,
        make: impl FnOnce(&Registry<'_>) -> Result<A, E>,
    ) -> Result<usize, E> {
        let agent = make(&Registry {
            epoll: &self.epoll,
            agent: self.agents.len(),
        })?;
        Ok(self.add(agent))
    }

    /// What agent `agent` may change in the epoll (before the loop runs: its first descriptors).
    pub fn registry(&self, agent: usize) -> Registry<'_> {
        Registry {
            epoll: &self.epoll,
            agent,
        }
    }

    /// Every agent ends once `fd` turns readable (a signal's wake-up descriptor: `signal.set_wakeup_fd`).
    pub fn stop_on(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.add(fd, STOP, READABLE)
    }

    /// The agent at `index`, while it runs.
    pub fn agent(&self, index: usize) -> Option<&A> {
        self.agents.get(index)?.as_ref()
    }

    /// Serves every agent until all have stopped, or [`EventLoop::stop`] is set.
    pub fn run(&mut self) -> io::Result<()> {
        let now = monotonic_ns()?;
        for index in 0..self.agents.len() {
            self.after(index, now);
        }
        self.end_stopped();
        let mut spin_to = self.arm()?;
        let mut by_agent: Vec<(usize, u32, Ready)> = Vec::with_capacity(EVENTS);
        while self.agents.iter().any(Option::is_some) {
            let mut ready = std::mem::take(&mut self.ready);
            self.epoll
                .wait(&mut ready, if spin_to.is_some() { 0 } else { WAIT_MS })?;
            by_agent.clear();
            let mut timer = false;
            for event in &ready {
                match event.token {
                    TIMER => timer = true,
                    STOP => self.stop.store(true, Ordering::Relaxed),
                    token => by_agent.push(((token >> 32) as usize, token as u32, *event)),
                }
            }
            self.ready = ready;
            if timer {
                self.timer.consume()?;
                self.armed = None;
                let now = monotonic_ns()?;
                self.serve_due(now);
            }
            if spin_to.is_some() {
                let now = monotonic_ns()?;
                self.serve_due(now);
            }
            by_agent.sort_by_key(|&(agent, _, _)| agent); // stable: an agent's events in the kernel's order
            let mut at = 0;
            while at < by_agent.len() {
                let agent = by_agent[at].0;
                let mut now = monotonic_ns()?;
                while at < by_agent.len() && by_agent[at].0 == agent {
                    let (_, token, event) = by_agent[at];
                    let registry = Registry {
                        epoll: &self.epoll,
                        agent,
                    };
                    if let Some(Some(a)) = self.agents.get_mut(agent) {
                        a.ready(token, event, now, &registry);
                    }
                    now = self.serve_come(now)?;
                    at += 1;
                }
                self.after(agent, now);
                self.serve_come(now)?;
            }
            self.end_stopped();
            spin_to = self.arm()?;
        }
        Ok(())
    }

    /// Finishes the agents that stopped (every one once a stop is asked).
    fn end_stopped(&mut self) {
        let stopping = self.stop.load(Ordering::Relaxed);
        for (index, slot) in self.agents.iter_mut().enumerate() {
            if stopping || slot.as_ref().is_some_and(|a| !a.running()) {
                if let Some(mut agent) = slot.take() {
                    agent.finish(&Registry {
                        epoll: &self.epoll,
                        agent: index,
                    });
                }
            }
        }
    }

    /// Agent `index`'s `after_events`, and its next deadline kept.
    fn after(&mut self, index: usize, now: u64) {
        let registry = Registry {
            epoll: &self.epoll,
            agent: index,
        };
        let next = match self.agents.get_mut(index) {
            Some(Some(agent)) => agent.after_events(now, &registry),
            _ => return,
        };
        if let Some(slot) = self.deadlines.get_mut(index) {
            if *slot != next {
                *slot = next;
                if let Some(deadline) = next {
                    self.heap.push(Reverse((deadline, index)));
                }
            }
        }
    }

    /// Serves the deadlines that came while a handler or an `after_events` ran; the time to go on at.
    fn serve_come(&mut self, now: u64) -> io::Result<u64> {
        self.drop_stale();
        match self.heap.peek() {
            Some(&Reverse((deadline, _))) => {
                let clock = monotonic_ns()?;
                if deadline <= clock {
                    self.serve_due(clock);
                    Ok(clock)
                } else {
                    Ok(now)
                }
            }
            None => Ok(now),
        }
    }

    /// Every agent whose deadline has come by `now` runs it, then (after all of them) its `after_events`.
    fn serve_due(&mut self, now: u64) {
        let mut due = Vec::new();
        loop {
            self.drop_stale();
            match self.heap.peek() {
                Some(&Reverse((deadline, index))) if deadline <= now => {
                    self.heap.pop();
                    if let Some(slot) = self.deadlines.get_mut(index) {
                        *slot = None;
                    }
                    due.push((deadline, index));
                }
                _ => break,
            }
        }
        for &(deadline, index) in &due {
            let registry = Registry {
                epoll: &self.epoll,
                agent: index,
            };
            if let Some(Some(agent)) = self.agents.get_mut(index) {
                agent.deadline(deadline, now, &registry);
            }
        }
        for &(_, index) in &due {
            self.after(index, now);
        }
    }

    /// Pops heap entries that are no agent's live deadline any more.
    fn drop_stale(&mut self) {
        while let Some(&Reverse((deadline, index))) = self.heap.peek() {
            let live = self.deadlines.get(index).copied().flatten() == Some(deadline)
                && self.agents.get(index).is_some_and(Option::is_some);
            if live {
                break;
            }
            self.heap.pop();
        }
    }

    /// Arms the timerfd for the earliest live deadline, or its agent's spin before it; the deadline to poll
    /// for without sleeping when that spin has begun.
    fn arm(&mut self) -> io::Result<Option<u64>> {
        if self.heap.len() > 2 * self.agents.len() + HEAP_SLACK {
            let agents = &self.agents;
            self.heap = self
                .deadlines
                .iter()
                .enumerate()
                .filter(|&(index, _)| agents.get(index).is_some_and(Option::is_some))
                .filter_map(|(index, deadline)| deadline.map(|deadline| Reverse((deadline, index))))
                .collect();
        }
        self.drop_stale();
        let next = self.heap.peek().map(|&Reverse((deadline, index))| {
            let spin = match self.agents.get(index) {
                Some(Some(agent)) => agent.spin_ns(),
                _ => 0,
            };
            (deadline, spin)
        });
        let (wake, spin_to) = match next {
            None => (None, None),
            Some((deadline, 0)) => (Some(deadline), None),
            Some((deadline, spin)) => {
                let wake = deadline.saturating_sub(spin);
                if wake <= monotonic_ns()? {
                    (None, Some(deadline))
                } else {
                    (Some(wake), None)
                }
            }
        };
        if wake != self.armed {
            self.timer.arm(wake)?;
            self.armed = wake;
        }
        Ok(spin_to)
    }
}

fn token_of(agent: usize, token: u32) -> u64 {
    ((agent as u64) << 32) | u64::from(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::rc::Rc;

    /// An agent reading a stream until it has `wanted` bytes, with one deadline at most; what happened to it
    /// goes to `log`, in order.
    struct Reader {
        stream: UnixStream,
        log: Rc<RefCell<Vec<String>>>,
        wanted: usize,
        got: usize,
        wake_at: Option<u64>,
        /// How long before its deadline the loop polls instead of sleeping.
        spin: u64,
    }

    impl Agent for Reader {
        fn ready(&mut self, token: u32, ready: Ready, _now: u64, _registry: &Registry<'_>) {
            let mut buffer = [0u8; 64];
            let n = self.stream.read(&mut buffer).unwrap_or(0);
            self.got += n;
            self.log
                .borrow_mut()
                .push(format!("ready {token} {} {n}", ready.readable));
        }
        fn deadline(&mut self, deadline: u64, now: u64, _registry: &Registry<'_>) {
            let on_time = now >= deadline && Some(deadline) == self.wake_at;
            self.log.borrow_mut().push(format!("deadline {on_time}"));
            self.wake_at = None;
        }
        fn after_events(&mut self, _now: u64, _registry: &Registry<'_>) -> Option<u64> {
            self.log.borrow_mut().push("after".into());
            self.wake_at
        }
        fn running(&self) -> bool {
            self.got < self.wanted || self.wake_at.is_some()
        }
        fn finish(&mut self, registry: &Registry<'_>) {
            let gone = registry.unwatch(self.stream.as_raw_fd()).is_ok();
            self.log.borrow_mut().push(format!("finish {gone}"));
        }
        fn spin_ns(&self) -> u64 {
            self.spin
        }
    }

    /// A loop with one reader, watched as token 7; the stream's other end; the reader's log; and a stop set
    /// after 5 s, so that a test that fails cannot hang.
    fn one_reader(
        wanted: usize,
        wake_at: Option<u64>,
    ) -> (EventLoop<Reader>, UnixStream, Rc<RefCell<Vec<String>>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut event_loop = EventLoop::new().unwrap();
        let fd = ours.as_raw_fd();
        let index = event_loop.add(Reader {
            stream: ours,
            log: log.clone(),
            wanted,
            got: 0,
            wake_at,
            spin: 0,
        });
        event_loop.registry(index).watch(fd, 7, READABLE).unwrap();
        let stop = event_loop.stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(5));
            stop.store(true, Ordering::Relaxed);
        });
        (event_loop, theirs, log)
    }

    #[test]
    fn an_agents_handlers_come_before_its_after_events_and_it_ends_when_done() {
        let (mut event_loop, mut writer, log) = one_reader(3, None);
        writer.write_all(b"abc").unwrap();
        event_loop.run().unwrap();
        assert_eq!(
            *log.borrow(),
            ["after", "ready 7 true 3", "after", "finish true"]
        );
        assert!(event_loop.agent(0).is_none());
    }

    #[test]
    fn a_deadline_is_served_then_the_agents_after_events() {
        let soon = monotonic_ns().unwrap() + 2_000_000;
        let (mut event_loop, _writer, log) = one_reader(0, Some(soon));
        event_loop.run().unwrap();
        assert_eq!(
            *log.borrow(),
            ["after", "deadline true", "after", "finish true"]
        );
        assert!(!event_loop.stop.load(Ordering::Relaxed));
    }

    #[test]
    fn a_spun_deadline_wakes_the_loop_early_and_is_served_at_its_time_not_before() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let log = Rc::new(RefCell::new(Vec::new()));
        let deadline = monotonic_ns().unwrap() + 20_000_000;
        let reader = Reader {
            stream: ours,
            log: log.clone(),
            wanted: 0,
            got: 0,
            wake_at: Some(deadline),
            spin: 15_000_000,
        };
        let mut event_loop = EventLoop::new().unwrap();
        let index = event_loop.add(reader);
        event_loop.after(index, 0);
        assert_eq!(event_loop.arm().unwrap(), None, "not yet in its spin");
        assert_eq!(event_loop.armed, Some(deadline - 15_000_000));
        log.borrow_mut().clear();
        let stop = event_loop.stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(5));
            stop.store(true, Ordering::Relaxed); // a loop that never serves it fails, not hangs
        });
        event_loop.run().unwrap();
        assert_eq!(
            *log.borrow(),
            ["after", "deadline true", "after", "finish false"]
        );
    }

    /// An agent that moves its deadline later at every byte it reads, then ends.
    struct Mover(Reader, u64);

    impl Agent for Mover {
        fn ready(&mut self, token: u32, ready: Ready, now: u64, registry: &Registry<'_>) {
            self.0.ready(token, ready, now, registry);
        }
        fn deadline(&mut self, deadline: u64, now: u64, registry: &Registry<'_>) {
            self.0.deadline(deadline, now, registry);
        }
        fn after_events(&mut self, _now: u64, _registry: &Registry<'_>) -> Option<u64> {
            self.1 += 1;
            Some(u64::MAX - 1_000_000 - self.1) // far off, and earlier each time: the old ones stay below the top
        }
        fn running(&self) -> bool {
            self.0.got < self.0.wanted
        }
        fn finish(&mut self, registry: &Registry<'_>) {
            self.0.finish(registry);
        }
    }

    #[test]
    fn deadlines_moved_do_not_pile_up() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let reader = Reader {
            stream: ours,
            log: Rc::new(RefCell::new(Vec::new())),
            wanted: 1,
            got: 0,
            wake_at: None,
            spin: 0,
        };
        let mut event_loop = EventLoop::new().unwrap();
        let index = event_loop.add(Mover(reader, 0));
        for _ in 0..1000 {
            event_loop.after(index, 0); // a new, earlier deadline each time, as per-frame work would set it
            assert_eq!(event_loop.arm().unwrap(), None);
        }
        assert!(
            event_loop.heap.len() <= 2 + HEAP_SLACK + 1,
            "{}",
            event_loop.heap.len()
        );
        let live = event_loop
            .heap
            .peek()
            .map(|&Reverse((deadline, _))| deadline);
        assert_eq!(live, event_loop.deadlines[index]); // the earliest is still the agent's live one
    }

    #[test]
    fn a_readable_stop_descriptor_ends_every_agent() {
        let (mut event_loop, _writer, log) = one_reader(1, None); // waits for a byte that never comes
        let (wake, mut signal) = UnixStream::pair().unwrap();
        event_loop.stop_on(wake.as_raw_fd()).unwrap();
        signal.write_all(&[15]).unwrap(); // what CPython's handler writes for SIGTERM
        let began = std::time::Instant::now();
        event_loop.run().unwrap();
        assert!(began.elapsed() < std::time::Duration::from_secs(2)); // not the 5 s guard's stop
        assert_eq!(*log.borrow(), ["after", "finish true"]);
        assert!(event_loop.stop.load(Ordering::Relaxed));
    }

    #[test]
    fn a_stop_ends_every_agent() {
        let (mut event_loop, _writer, log) = one_reader(1, None); // waits for a byte that never comes
        let stop = event_loop.stop.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            stop.store(true, Ordering::Relaxed);
        });
        event_loop.run().unwrap();
        stopper.join().unwrap();
        assert_eq!(*log.borrow(), ["after", "finish true"]);
        assert!(event_loop.agent(0).is_none());
    }
}
