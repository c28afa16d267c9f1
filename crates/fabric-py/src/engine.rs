//! `emulator._core.engine`: fabric-core's discrete-event engine for Python callers
//! (`Simulator`, `Timer`, `Handle`), callbacks being Python callables.
//!
//! The core engine delivers small `Copy` values; here a value names a callback in a table the simulator
//! keeps (one-shot calls with their arguments, freed when they run or are cancelled; timers' callbacks).
//! The engine is borrowed only between callbacks, never across one, so a callback schedules, cancels and
//! stops as it likes. The simulator and its timers tell the garbage collector what they hold: a model's
//! timer calls back into the model, which holds the simulator, and such cycles must be collected (a study
//! builds a fabric per variant).
use fabric_core::sim::engine::{Engine, EventId, Run, TimerId};
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyTraverseError;

/// What a queue entry runs: a one-shot call (an index into `Simulator::calls`), or a timer's callback (an
/// index into `Simulator::timer_callbacks`).
#[derive(Clone, Copy, Debug)]
enum Call {
    Once(u32),
    Timer(u32),
}

/// A scheduled event's handle: `Simulator.cancel` and `Simulator.pending` take it.
#[pyclass(frozen, module = "emulator._core.engine")]
pub struct Handle {
    id: EventId,
    /// Its call's index in `Simulator::calls`, freed when the call is cancelled.
    call: u32,
}

/// Simulated time and the events to come .
#[pyclass(module = "emulator._core.engine")]
pub struct Simulator {
    engine: Engine<Call>,
    /// One-shot calls waiting: (callback, args), `None` once run or cancelled (the slot then in `free`).
    calls: Vec<Option<(Py<PyAny>, Py<PyTuple>)>>,
    free: Vec<u32>,
    timer_callbacks: Vec<Py<PyAny>>,
}

/// One callback at a deadline that moves : moving it later keeps its one queue
/// entry, which re-arms when it comes up early.
#[pyclass(module = "emulator._core.engine")]
pub struct Timer {
    /// The simulator it runs in.
    #[pyo3(get)]
    sim: Py<Simulator>,
    /// What it calls when the deadline comes.
    #[pyo3(get)]
    callback: Py<PyAny>,
    id: TimerId,
}

/// A time (ns) as the core engine holds it; Python ints are unbounded, the engine's time is a u64.
fn nanoseconds(time: i128) -> PyResult<u64> {
    u64::try_from(time).map_err(|_| {
        PyOverflowError::new_err(format!(
            "time {time} ns is past the engine's range (u64 ns)"
        ))
    })
}

impl Simulator {
    /// Schedules `callback(*args)` `delay` ns from now.
    fn schedule(&mut self, delay: u64, callback: Py<PyAny>, args: Py<PyTuple>) -> PyResult<Handle> {
        let entry = Some((callback, args));
        let index = match self.free.pop() {
            Some(index) => {
                self.calls[index as usize] = entry;
                index
            }
            None => {
                self.calls.push(entry);
                u32::try_from(self.calls.len() - 1)
                    .map_err(|_| PyOverflowError::new_err("more than 2^32 events pending"))?
            }
        };
        Ok(Handle {
            id: self.engine.after(delay, Call::Once(index)),
            call: index,
        })
    }

    /// Frees a one-shot call's slot and hands its callback and arguments over.
    fn take_call(&mut self, index: u32) -> Option<(Py<PyAny>, Py<PyTuple>)> {
        let call = self.calls.get_mut(index as usize)?.take();
        self.free.push(index);
        call
    }

    /// The run's next callback due, taken out of the simulator, or `None` at the end of the run.
    fn next_callback(&mut self, py: Python<'_>, run: &mut Run) -> Option<Due> {
        loop {
            match self.engine.next_event(run)? {
                Call::Once(index) => {
                    if let Some((callback, args)) = self.take_call(index) {
                        return Some(Due::Once(callback, args));
                    }
                }
                Call::Timer(index) => {
                    if let Some(callback) = self.timer_callbacks.get(index as usize) {
                        return Some(Due::Timer(callback.clone_ref(py)));
                    }
                }
            }
        }
    }
}

/// A callback due now, taken out of the simulator so that it runs with the simulator not borrowed.
enum Due {
    Once(Py<PyAny>, Py<PyTuple>),
    Timer(Py<PyAny>),
}

#[pymethods]
impl Simulator {
    #[new]
    fn new() -> Self {
        Self {
            engine: Engine::new(),
            calls: Vec::new(),
            free: Vec::new(),
            timer_callbacks: Vec::new(),
        }
    }

    /// Simulated time (ns).
    #[getter]
    fn now(&self) -> u64 {
        self.engine.now()
    }

    /// Callbacks run so far (timers' own wake-ups included, as the Python engine counts).
    #[getter]
    fn events(&self) -> u64 {
        self.engine.events()
    }

    /// A model's one wake-up (its next deadline), re-armed as the model's answer changes.
    fn timer(slf: &Bound<'_, Self>, callback: Py<PyAny>) -> Timer {
        let py = slf.py();
        let mut this = slf.borrow_mut();
        let index = this.timer_callbacks.len() as u32;
        this.timer_callbacks.push(callback.clone_ref(py));
        let id = this.engine.timer(Call::Timer(index));
        Timer {
            sim: slf.clone().unbind(),
            callback,
            id,
        }
    }

    /// Run `callback(*args)` at `time` (ns, not before now); the handle cancels it.
    #[pyo3(signature = (time, callback, *args))]
    fn at(&mut self, time: i128, callback: Py<PyAny>, args: Py<PyTuple>) -> PyResult<Handle> {
        let now = self.engine.now();
        if time < i128::from(now) {
            return Err(PyValueError::new_err(format!(
                "event at {time} ns is before now ({now} ns)"
            )));
        }
        self.schedule(nanoseconds(time)? - now, callback, args)
    }

    /// Run `callback(*args)` `delay` ns from now.
    #[pyo3(signature = (delay, callback, *args))]
    fn after(&mut self, delay: i128, callback: Py<PyAny>, args: Py<PyTuple>) -> PyResult<Handle> {
        let time = i128::from(self.engine.now()).saturating_add(delay);
        self.at(time, callback, args)
    }

    /// Keep a scheduled event from running (nothing if it ran already, or for None).
    #[pyo3(signature = (handle))]
    fn cancel(&mut self, handle: Option<&Handle>) {
        if let Some(handle) = handle {
            if self.engine.cancel(handle.id) {
                self.take_call(handle.call);
            }
        }
    }

    /// Whether a scheduled event is still to run.
    fn pending(&self, handle: &Handle) -> bool {
        self.engine.pending(handle.id)
    }

    /// When the next pending event is due, or None when none is.
    fn next_time(&mut self) -> Option<u64> {
        self.engine.next_time()
    }

    /// Entries in the queue, cancelled ones not yet popped included: what the engine holds in memory.
    fn entries(&self) -> usize {
        self.engine.entries()
    }

    /// Run events in time order until none is left, the next is after `until` (then now = until),
    /// `max_events` have run or a callback called `stop`; how many ran.
    #[pyo3(signature = (until = None, max_events = None))]
    fn run(slf: &Bound<'_, Self>, until: Option<i128>, max_events: Option<i128>) -> PyResult<u64> {
        let py = slf.py();
        let max_events = max_events.map(|limit| u64::try_from(limit.max(0)).unwrap_or(u64::MAX));
        let mut run = match until {
            // Before time began: nothing is due, and now stays.
            Some(until) if until < 0 => slf.borrow_mut().engine.start_run(None, Some(0)),
            Some(until) => {
                let until = u64::try_from(until).unwrap_or(u64::MAX);
                slf.borrow_mut().engine.start_run(Some(until), max_events)
            }
            None => slf.borrow_mut().engine.start_run(None, max_events),
        };
        loop {
            let due = slf.borrow_mut().next_callback(py, &mut run);
            match due {
                None => break,
                Some(Due::Once(callback, args)) => callback.call1(py, args.bind(py))?,
                Some(Due::Timer(callback)) => callback.call0(py)?,
            };
        }
        Ok(slf.borrow_mut().engine.end_run(run))
    }

    /// End `run` after the event now running (the rest stay pending).
    fn stop(&mut self) {
        self.engine.stop();
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for (callback, args) in self.calls.iter().flatten() {
            visit.call(callback)?;
            visit.call(args)?;
        }
        for callback in &self.timer_callbacks {
            visit.call(callback)?;
        }
        Ok(())
    }

    /// Drops the callbacks (the collector breaking a cycle); their entries, when they come up, run nothing.
    fn __clear__(&mut self) {
        self.calls.iter_mut().for_each(|call| *call = None);
        self.timer_callbacks.clear();
    }
}

#[pymethods]
impl Timer {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.sim)?;
        visit.call(&self.callback)
    }

    /// Move the deadline (ns; None unsets it); a deadline already past fires now.
    #[pyo3(signature = (deadline))]
    fn set(&self, py: Python<'_>, deadline: Option<i128>) {
        let deadline = deadline.map(|at| u64::try_from(at.max(0)).unwrap_or(u64::MAX));
        self.sim
            .bind(py)
            .borrow_mut()
            .engine
            .set_timer(self.id, deadline);
    }
}

/// Fills `emulator._core.engine`: `Simulator`, `Timer`, `Handle`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Simulator>()?;
    m.add_class::<Timer>()?;
    m.add_class::<Handle>()?;
    Ok(())
}
