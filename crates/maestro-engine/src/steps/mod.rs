//! TAKT workflow step kinds other than agent steps, each in its own module.

pub(crate) mod frame;
pub(crate) mod workflow_call;
