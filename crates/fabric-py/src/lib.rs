//! `emulator._core`: the Python face of fabric-core, one submodule per model (`from emulator._core.mmu import Mmu`).
//!
//! Thin by design: argument conversion and errors only. A model's failure is a Python exception with one line,
//! never a panic (PyO3 would turn one into `PanicException`; the models do not panic on any input).
use pyo3::prelude::*;
use pyo3::types::PyDict;

mod credits;
mod dataplane;
mod dcqcn;
mod engine;
mod fidelity;
mod forwarding;
mod ib;
mod ib_plane;
mod ib_port;
mod io;
mod link;
mod mac;
mod mmu;
mod nic;
mod pause;
mod pfc;
mod pfcwd;
mod rc;
mod rdma_params;
mod roce;
mod rx_pipeline;
mod sim;
mod transport;
mod uet;

/// Each submodule's name and the function that fills it.
type Register = fn(&Bound<'_, PyModule>) -> PyResult<()>;
const SUBMODULES: &[(&str, Register)] = &[
    ("mac", mac::register),
    ("pfc", pfc::register),
    ("transport", transport::register),
    ("roce", roce::register),
    ("uet", uet::register),
    ("ib", ib::register),
    ("rdma_params", rdma_params::register),
    ("pause", pause::register),
    ("pfcwd", pfcwd::register),
    ("forwarding", forwarding::register),
    ("mmu", mmu::register),
    ("rx_pipeline", rx_pipeline::register),
    ("rc", rc::register),
    ("dcqcn", dcqcn::register),
    ("credits", credits::register),
    ("ib_port", ib_port::register),
    ("ib_plane", ib_plane::register),
    ("link", link::register),
    ("fidelity", fidelity::register),
    ("engine", engine::register),
    ("sim", sim::register),
    ("io", io::register),
    ("dataplane", dataplane::register),
];

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // `from emulator._core.mmu import Mmu` looks in sys.modules, where PyO3 does not put submodules.
    let modules = py
        .import("sys")?
        .getattr("modules")?
        .cast_into::<PyDict>()?;
    for (name, register) in SUBMODULES {
        let sub = PyModule::new(py, name)?;
        register(&sub)?;
        m.add_submodule(&sub)?;
        modules.set_item(format!("emulator._core.{name}"), &sub)?;
    }
    Ok(())
}
