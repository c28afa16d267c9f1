//! `emulator._core`: the Python face of fabric-core, one submodule per model (`from emulator._core import mmu`).
//!
//! Thin by design: argument conversion and errors only. A model's failure is a Python exception with one line,
//! never a panic (PyO3 would turn one into `PanicException`; the models do not panic on any input).
use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
