//! Frame formats on bytes: parse and encode, with their CRCs. Lowest layer of the core.
pub mod ib;
pub mod mac;
pub mod pfc;
pub mod roce;
pub mod transport;
pub mod uet;
