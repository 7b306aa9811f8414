//! `kerf simulate --replay FILE`: a cluster's history played into the simulated cluster at
//! many times real speed. [`log`] reads the replay log (upstream kubereplay's format and
//! kerf's extensions, written by `kerf record`, see [`crate::record`]); [`setup`] chooses the
//! NodePools and EC2NodeClasses; [`run`] moves the replay clock and applies the events
//! through `driver`; [`report`] meters the fleet in the log's time and sets two replays side
//! by side (`--compare`); [`generate`] makes a diurnal day for tests and figures.

mod driver;
pub mod generate;
pub mod log;
pub mod report;
pub mod run;
pub mod setup;

pub use log::{ReplayLog, read};
pub use report::{Comparison, ReplayReport};
