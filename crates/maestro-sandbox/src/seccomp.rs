//! The seccomp filters every sandboxed command runs under, in both kernel sandboxes (bubblewrap
//! hands them to the kernel right before it starts the command; the landlock fallback installs
//! them in the child before `exec`).
//!
//! Two programs, because one seccomp program has one "matched" action:
//! - **deny** answers `EPERM` to what a shell command never needs and an escape always does:
//!   new namespaces (`unshare`, `setns`, `clone` with namespace flags), `io_uring`, `ptrace`
//!   and cross-process memory access, the kernel keyring, `bpf`, `perf_event_open`,
//!   `userfaultfd`, every mount call, module loading, `reboot`/`kexec`, and any `chmod`, `open`
//!   or `mknod` that would set a set-user-ID or set-group-ID bit. In the landlock fallback it
//!   also refuses sockets of every family but `AF_UNIX`, which keeps the network out.
//! - **enosys** answers `ENOSYS` to `clone3` and `openat2`, whose flags live in memory a filter
//!   cannot read: the C library then falls back to `clone`/`openat`, which the deny program
//!   inspects.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::SandboxError;

/// Whether the command may open network sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Network {
    /// Any socket family (bubblewrap unshares the network: only an empty loopback exists).
    Namespaced,
    /// Only `AF_UNIX` sockets (the landlock fallback shares the host's network).
    UnixOnly,
}

/// The two compiled programs, in the order they are installed.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    pub deny: BpfProgram,
    pub enosys: BpfProgram,
}

/// The filters for `network`, compiled once per process.
pub(crate) fn filters(network: Network) -> Result<&'static Filters, SandboxError> {
    static NAMESPACED: OnceLock<Result<Filters, Arc<seccompiler::Error>>> = OnceLock::new();
    static UNIX_ONLY: OnceLock<Result<Filters, Arc<seccompiler::Error>>> = OnceLock::new();
    let cell = match network {
        Network::Namespaced => &NAMESPACED,
        Network::UnixOnly => &UNIX_ONLY,
    };
    cell.get_or_init(|| compile(network).map_err(Arc::new))
        .as_ref()
        .map_err(|e| SandboxError::Seccomp(Arc::clone(e)))
}

/// A program as the bytes of its `struct sock_filter` array, the form `bwrap --add-seccomp-fd`
/// reads.
pub(crate) fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

const SETID: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
];

fn compile(network: Network) -> Result<Filters, seccompiler::Error> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in ALWAYS_DENIED {
        deny.insert(*nr, Vec::new());
    }
    // clone(flags, ...): any namespace flag.
    deny.insert(
        libc::SYS_clone,
        NAMESPACE_FLAGS
            .iter()
            .map(|f| masked(0, SeccompCmpArgLen::Qword, *f))
            .collect::<Result<_, _>>()?,
    );
    // chmod-like calls: the mode argument carries a set-id bit.
    #[cfg(target_arch = "x86_64")]
    deny.insert(libc::SYS_chmod, setid_rules(1, None)?);
    deny.insert(libc::SYS_fchmod, setid_rules(1, None)?);
    deny.insert(libc::SYS_fchmodat, setid_rules(2, None)?);
    deny.insert(SYS_FCHMODAT2, setid_rules(2, None)?);
    // Creating a file with a set-id mode: open(path, flags, mode), openat(dir, path, flags,
    // mode), creat(path, mode), mknod(path, mode, dev), mknodat(dir, path, mode, dev).
    #[cfg(target_arch = "x86_64")]
    {
        deny.insert(libc::SYS_open, setid_rules(2, Some(1))?);
        deny.insert(libc::SYS_creat, setid_rules(1, None)?);
        deny.insert(libc::SYS_mknod, setid_rules(1, None)?);
    }
    deny.insert(libc::SYS_openat, setid_rules(3, Some(2))?);
    deny.insert(libc::SYS_mknodat, setid_rules(2, None)?);
    if network == Network::UnixOnly {
        deny.insert(
            libc::SYS_socket,
            vec![SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )?])?],
        );
    }
    let deny = SeccompFilter::new(
        deny,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?
    .try_into()?;
    let enosys: BTreeMap<i64, Vec<SeccompRule>> =
        [(libc::SYS_clone3, Vec::new()), (SYS_OPENAT2, Vec::new())]
            .into_iter()
            .collect();
    let enosys = SeccompFilter::new(
        enosys,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?
    .try_into()?;
    Ok(Filters { deny, enosys })
}

/// `fchmodat2` (Linux 6.6) and `openat2` (5.6) share their number on every architecture.
const SYS_FCHMODAT2: i64 = 452;
const SYS_OPENAT2: i64 = 437;

/// Calls a shell command never needs, refused outright.
const ALWAYS_DENIED: &[i64] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_chroot,
];

/// One rule per set-id bit: the mode argument `mode_arg` has it (and, for `open`-like calls, the
/// flags argument `creat_flags_arg` has `O_CREAT`, since the mode means nothing without it).
fn setid_rules(
    mode_arg: u8,
    creat_flags_arg: Option<u8>,
) -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    SETID
        .iter()
        .map(|bit| {
            let mut conditions = vec![SeccompCondition::new(
                mode_arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(*bit),
                *bit,
            )?];
            if let Some(flags) = creat_flags_arg {
                conditions.push(SeccompCondition::new(
                    flags,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(libc::O_CREAT as u64),
                    libc::O_CREAT as u64,
                )?);
            }
            SeccompRule::new(conditions)
        })
        .collect()
}

fn masked(
    arg: u8,
    len: SeccompCmpArgLen,
    bit: u64,
) -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![SeccompCondition::new(
        arg,
        len,
        SeccompCmpOp::MaskedEq(bit),
        bit,
    )?])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn both_programs_compile_for_this_architecture() {
        for network in [Network::Namespaced, Network::UnixOnly] {
            let f = filters(network).unwrap();
            assert!(!f.deny.is_empty() && !f.enosys.is_empty());
            assert_eq!(to_bytes(&f.deny).len(), f.deny.len() * 8);
        }
        // The socket rule makes the fallback's program longer.
        assert!(
            filters(Network::UnixOnly).unwrap().deny.len()
                > filters(Network::Namespaced).unwrap().deny.len()
        );
    }
}
