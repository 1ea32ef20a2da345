//! Who holds a job's lease, as the store records it (`jobs.lease_owner`): a worker by its id, or
//! a local process (`maestro run` and the children it runs) by host and pid, so that a run
//! whose process is gone can be taken over on the same host without waiting for its lease.

use std::fmt;
use std::path::Path;

/// A local process as a lease owner: `local:<host>:<pid>` in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseOwner {
    host: String,
    pid: u32,
}

/// The prefix of a local process's lease owner.
const LOCAL: &str = "local";

impl LeaseOwner {
    /// This process.
    pub(crate) fn this_process() -> LeaseOwner {
        LeaseOwner {
            host: hostname(),
            pid: std::process::id(),
        }
    }

    /// The local process a stored lease owner names, if it names one.
    pub(crate) fn parse(owner: &str) -> Option<LeaseOwner> {
        let rest = owner.strip_prefix(LOCAL)?.strip_prefix(':')?;
        let (host, pid) = rest.rsplit_once(':')?;
        Some(LeaseOwner {
            host: host.to_string(),
            pid: pid.parse().ok()?,
        })
    }

    /// True when `owner` names a local process on this host that is gone.
    pub(crate) fn is_gone_process(owner: &str) -> bool {
        LeaseOwner::parse(owner).is_some_and(|owner| {
            owner.host == hostname() && !Path::new("/proc").join(owner.pid.to_string()).exists()
        })
    }
}

impl fmt::Display for LeaseOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{LOCAL}:{}:{}", self.host, self.pid)
    }
}

/// This machine's host name.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_local_owner_round_trips_and_a_worker_id_is_not_one() {
        let me = LeaseOwner::this_process();
        assert_eq!(LeaseOwner::parse(&me.to_string()), Some(me.clone()));
        assert!(!LeaseOwner::is_gone_process(&me.to_string()));
        assert_eq!(
            LeaseOwner::parse("0190c4c2-7d2e-7000-8000-000000000000"),
            None
        );
        assert_eq!(LeaseOwner::parse("local:h:notapid"), None);
        // A host name with a colon still parses: the pid is the last field.
        assert_eq!(
            LeaseOwner::parse("local:a:b:42"),
            Some(LeaseOwner {
                host: "a:b".into(),
                pid: 42
            })
        );
    }

    #[test]
    fn a_process_that_is_gone_is_told_apart() {
        let gone = LeaseOwner {
            host: hostname(),
            pid: u32::MAX - 1,
        };
        assert!(LeaseOwner::is_gone_process(&gone.to_string()));
        let elsewhere = LeaseOwner {
            host: format!("{}-elsewhere", hostname()),
            pid: u32::MAX - 1,
        };
        assert!(!LeaseOwner::is_gone_process(&elsewhere.to_string()));
    }
}
