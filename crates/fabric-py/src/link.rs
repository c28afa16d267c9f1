//! `emulator._core.link`: a switch port's side of a link.
//!
//! Frames stay Python objects: the link stores and hands back the very objects it was given (an agent sends
//! them as they are, and the head's loss draw is once per object, as Python's `is` tells). The egress queue
//! is any object with the MMU's `head(egress)` and `pop(egress, priority)`.
use fabric_core::model::link as core;
use fabric_core::wire::pfc::PRIORITIES;
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList, PySet, PyTuple};

/// A frame as the link holds it: the caller's object itself.
struct PyFrame(Py<PyAny>);

impl core::SameFrame for PyFrame {
    fn same_frame(&self, other: &Self) -> bool {
        self.0.is(&other.0)
    }
}

/// A priority as a Python list index into `injected_drops` (negative counts from the end); else the
/// `IndexError` or `TypeError` Python's list would raise.
fn priority_index(priority: &Bound<'_, PyAny>) -> PyResult<usize> {
    let value: isize = priority.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "list indices must be integers or slices, not {}",
            priority
                .get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })?;
    let index = if value < 0 {
        value.checked_add(PRIORITIES as isize)
    } else {
        Some(value)
    };
    index
        .and_then(|i| usize::try_from(i).ok())
        .filter(|&i| i < PRIORITIES)
        .ok_or_else(|| PyIndexError::new_err("list index out of range"))
}

/// The 32-bit words of `abs(seed)`, least significant first, as CPython's `random.Random(seed)` seeds with
/// (the MMU's seed, and a link's that fits in 128 bits).
pub(crate) fn small_seed_words(seed: i128) -> [u32; 4] {
    let magnitude = seed.unsigned_abs();
    std::array::from_fn(|word| (magnitude >> (32 * word)) as u32)
}

/// The 32-bit words of the magnitude CPython's `random.Random(seed)` seeds with: `abs(n)` of an int, the
/// hash (as an unsigned word) of a float.
fn seed_words(seed: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let magnitude = if let Ok(int) = seed.cast::<PyInt>() {
        if let Ok(small) = int.extract::<i128>() {
            return Ok(small_seed_words(small).to_vec());
        }
        // int.__abs__, not the object's own __abs__ (CPython's random_seed does the same).
        seed.py()
            .get_type::<PyInt>()
            .call_method1(intern!(seed.py(), "__abs__"), (int,))?
    } else if seed.is_instance_of::<PyFloat>() {
        let hash = seed.hash()? as usize as u64;
        return Ok(vec![hash as u32, (hash >> 32) as u32]);
    } else {
        return Err(PyTypeError::new_err(
            "a link's seed is an int (or a float), as random.Random seeds it",
        ));
    };
    let py = seed.py();
    let bits: usize = magnitude
        .call_method0(intern!(py, "bit_length"))?
        .extract()?;
    let bytes: Vec<u8> = magnitude
        .call_method1(intern!(py, "to_bytes"), (bits.div_ceil(32) * 4, "little"))?
        .extract()?;
    Ok(bytes
        .chunks_exact(4)
        .map(|word| u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
        .collect())
}

/// A Python object with the MMU's `head(egress) -> (priority, frame) | None` and `pop(egress, priority)`.
struct PyQueue<'a, 'py>(&'a Bound<'py, PyAny>);

impl core::EgressQueue for PyQueue<'_, '_> {
    type Frame = PyFrame;
    type Error = PyErr;

    /// `head`, then `pop` of the head's priority, then the frame's length, in the Python model's order.
    fn take_head(&mut self, egress: usize) -> PyResult<Option<core::Dequeued<PyFrame>>> {
        let py = self.0.py();
        let head = self.0.call_method1(intern!(py, "head"), (egress,))?;
        if head.is_none() {
            return Ok(None);
        }
        let (priority, frame): (Bound<'_, PyAny>, Bound<'_, PyAny>) = head.extract()?;
        self.0
            .call_method1(intern!(py, "pop"), (egress, &priority))?;
        let len = frame.len()?;
        Ok(Some(core::Dequeued {
            priority: priority_index(&priority)?,
            len,
            frame: PyFrame(frame.unbind()),
        }))
    }
}

/// Delay lines, loss draws and the virtual wire of one switch port.
///
/// `loss` is the probability of losing each frame; `drop` lists frame numbers (from 1, per direction) that
/// are always lost; `seed` makes the draws repeatable, the same as `random.Random(seed)` makes them.
#[pyclass(module = "emulator._core.link")]
pub struct Link {
    inner: core::Link<PyFrame>,
}

/// One of a link's delay lines, read in place: what Python's deque of `(due, frame)` offered its readers
/// (`len`, truth, indexing, iteration) without copying the line at every look.
#[pyclass(module = "emulator._core.link", frozen)]
pub struct DueFrames {
    link: Py<Link>,
    departures: bool,
}

impl DueFrames {
    /// A view of `link`'s departures (or arrivals); an empty line is the empty tuple, which costs no
    /// allocation: agents ask every port whether its lines are empty at each wake-up, and most are.
    fn of<'py>(link: &Bound<'py, Link>, departures: bool) -> PyResult<Bound<'py, PyAny>> {
        let py = link.py();
        let inner = &link.try_borrow()?.inner;
        let line = if departures {
            inner.departures()
        } else {
            inner.arrivals()
        };
        if line.is_empty() {
            return Ok(PyTuple::empty(py).into_any());
        }
        let view = DueFrames {
            link: link.clone().unbind(),
            departures,
        };
        Ok(Bound::new(py, view)?.into_any())
    }

    /// Runs `read` on the line this view shows (an error, not a panic, if the link is being changed).
    fn with_line<T>(&self, py: Python<'_>, read: impl FnOnce(&DueLine) -> T) -> PyResult<T> {
        let link = self.link.bind(py).try_borrow()?;
        let inner = &link.inner;
        Ok(read(if self.departures {
            inner.departures()
        } else {
            inner.arrivals()
        }))
    }

    /// The line's entries as `(due, frame)` tuples, a snapshot.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let entries = self.with_line(py, |line| {
            line.iter()
                .map(|entry| due_tuple(py, entry))
                .collect::<PyResult<Vec<_>>>()
        })??;
        PyList::new(py, entries)
    }
}

/// A delay line of the core's link, earliest first.
type DueLine = std::collections::VecDeque<core::Due<PyFrame>>;

/// One entry of a delay line as Python's deque held it: `(due, frame)`.
fn due_tuple<'py>(
    py: Python<'py>,
    (due, frame): &core::Due<PyFrame>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [due.into_pyobject(py)?.into_any(), frame.0.bind(py).clone()],
    )
}

#[pymethods]
impl DueFrames {
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_line(py, |line| line.len())
    }

    /// `line[i]`, negative from the end, as a deque's.
    fn __getitem__<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyTuple>> {
        self.with_line(py, |line| {
            let at = if index < 0 {
                index.checked_add_unsigned(line.len())
            } else {
                Some(index)
            };
            match at
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| line.get(i))
            {
                Some(entry) => due_tuple(py, entry),
                None => Err(PyIndexError::new_err("deque index out of range")),
            }
        })?
    }

    /// Iterates over a snapshot of the line.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.snapshot(py)?.try_iter().map(Bound::into_any)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("DueFrames({})", self.snapshot(py)?.repr()?))
    }
}

#[pymethods]
impl Link {
    #[new]
    fn new(
        rate_bps: u64,
        delay_ns: u64,
        host_facing: &Bound<'_, PyAny>,
        loss: f64,
        drop: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let drop = drop
            .try_iter()?
            .map(|item| item?.extract::<u64>())
            .collect::<PyResult<Vec<u64>>>()?;
        let inner = core::Link::new(
            rate_bps,
            delay_ns,
            host_facing.is_truthy()?,
            loss,
            &drop,
            &seed_words(seed)?,
        )
        .map_err(|err| PyValueError::new_err(err.to_string()))?;
        Ok(Link { inner })
    }

    #[getter]
    fn rate_bps(&self) -> u64 {
        self.inner.rate_bps()
    }

    #[getter]
    fn delay_ns(&self) -> u64 {
        self.inner.delay_ns()
    }

    #[getter]
    fn host_facing(&self) -> bool {
        self.inner.host_facing()
    }

    #[getter]
    fn paced(&self) -> bool {
        self.inner.paced()
    }

    #[getter]
    fn loss(&self) -> f64 {
        self.inner.loss()
    }

    #[getter]
    fn drop_seq<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        PySet::new(py, self.inner.drop_seq())
    }

    #[getter]
    fn lossy(&self) -> bool {
        self.inner.lossy()
    }

    /// `(due, frame)` entries: received, not yet processed.
    #[getter]
    fn arrivals<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        DueFrames::of(slf, false)
    }

    /// `(due, frame)` entries: on the wire, not yet at the kernel.
    #[getter]
    fn departures<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        DueFrames::of(slf, true)
    }

    #[getter]
    fn wire_free_at(&self) -> u64 {
        self.inner.wire_free_at()
    }

    #[getter]
    fn cleared(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner.cleared().map(|frame| frame.0.clone_ref(py))
    }

    #[getter]
    fn rx_seq(&self) -> u64 {
        self.inner.rx_seq()
    }

    #[getter]
    fn tx_seq(&self) -> u64 {
        self.inner.tx_seq()
    }

    #[getter]
    fn injected_drops(&self) -> Vec<u64> {
        self.inner.injected_drops().to_vec()
    }

    /// A frame came off the wire at `now`; it is processed once the link's delay has passed.
    fn arrive(&mut self, now: u64, frame: &Bound<'_, PyAny>) {
        self.inner.arrive(now, PyFrame(frame.clone().unbind()));
    }

    /// The next `(due, frame)` whose delay has passed by `now`; None if none has.
    fn arrived(&mut self, now: u64) -> Option<(u64, Py<PyAny>)> {
        self.inner.arrived(now).map(|(due, frame)| (due, frame.0))
    }

    /// Whether injected loss takes the next IPv4 frame from the host (counted if so).
    fn lost_from_host(&mut self, priority: &Bound<'_, PyAny>) -> PyResult<bool> {
        let priority = priority_index(priority)?;
        Ok(self.inner.lost_from_host(priority))
    }

    /// Whether injected loss takes `frame`, the head of the port's queue (counted if so); once per frame.
    fn lost_at_head(
        &mut self,
        frame: &Bound<'_, PyAny>,
        priority: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let priority = priority_index(priority)?;
        Ok(self
            .inner
            .lost_at_head(PyFrame(frame.clone().unbind()), priority))
    }

    /// Moves frames from port `index`'s queue onto the virtual wire while it is free at `now`; the frame
    /// that reaches the kernel by `now`, or None (it stays first until `left`).
    fn transmit(
        &mut self,
        py: Python<'_>,
        now: u64,
        queue: &Bound<'_, PyAny>,
        index: usize,
    ) -> PyResult<Option<Py<PyAny>>> {
        let due = self.inner.transmit(now, &mut PyQueue(queue), index)?;
        Ok(due.map(|frame| frame.0.clone_ref(py)))
    }

    /// The frame `transmit` (or this) gave is gone; the next one due by `now`, or None.
    fn left(&mut self, py: Python<'_>, now: u64) -> PyResult<Option<Py<PyAny>>> {
        if self.inner.departures().is_empty() {
            return Err(PyIndexError::new_err("pop from an empty deque"));
        }
        Ok(self.inner.left(now).map(|frame| frame.0.clone_ref(py)))
    }

    /// When this link next has something to do; `backlog`: the port's queue holds frames.
    fn next_deadline(&self, backlog: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        Ok(self.inner.next_deadline(backlog.is_truthy()?))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Link>()?;
    m.add_class::<DueFrames>()?;
    Ok(())
}
