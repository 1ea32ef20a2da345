//! Why a run or a visit ended: [`EndReason`] lives in `maestro-protocol`, where every reader of
//! a run finds it.

pub use maestro_protocol::{EndReason, UnknownEndReason};
