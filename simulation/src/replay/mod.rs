//! `kerf simulate --replay FILE`: a cluster's history played into the simulated cluster at
//! many times real speed. [`log`] reads the replay log (upstream kubereplay's format and
//! kerf's extensions).

pub mod log;

pub use log::{ReplayLog, read};
