//! Intercommunicators, from the standard's chapter "Groups, Contexts, Communicators, and
//! Caching" (MPI 4.1 section 7.6): `MPI_Intercomm_create`, `MPI_Intercomm_create_from_groups`,
//! `MPI_Intercomm_merge`, `MPI_Comm_test_inter`, `MPI_Comm_remote_size`,
//! `MPI_Comm_remote_group`, and the intercommunicator forms of `MPI_Comm_dup`,
//! `MPI_Comm_split` and `MPI_Comm_create` that `comm` hands over; also `MPI_Comm_idup` and
//! `MPI_Comm_idup_with_info`.
//!
//! The device makes them (`ch4_core::inter`): each group agrees on the context id it receives
//! on, the leaders exchange those ids and their members, and every intercommunicator comes with
//! a communicator of its local group, adopted on the same VCI, over which its collectives work
//! within the group. The VCI is chosen from the lower of the two groups' ids, which both
//! groups know, so both bind the intercommunicator to the same VCI.

use std::ffi::{c_char, c_int, CStr};

use ch4_core::comm::Comm;
use ch4_core::ErrorKind;

use crate::abi::{self, Handle};
use crate::call::{call, null_arg, on_device, put};
use crate::comm::parent;
use crate::groups::{group_in, group_out};
use crate::state::{CommRef, Rank, State};

/// Whether `c` is an intercommunicator, and its remote group's size if so.
pub(crate) fn remote_size(st: &State, c: CommRef) -> ch4::Result<Option<c_int>> {
    st.device(c.vci)?.remote_size(c.id)
}

/// The error for an intercommunicator given to a call that takes intracommunicators only.
pub(crate) fn intra_only(func: &str) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Comm,
        format!("{func} takes an intracommunicator, not an intercommunicator"),
    )
}

/// Fails with [`intra_only`] when `c` is an intercommunicator.
pub(crate) fn check_intra(st: &State, c: CommRef, func: &str) -> ch4::Result<()> {
    match remote_size(st, c)? {
        None => Ok(()),
        Some(_) => Err(intra_only(func)),
    }
}

/// Adds a new intercommunicator and its communicator of the local group to the device of the
/// VCI both groups bind it to (from [`ch4_core::inter::binding_context`]), the second as the
/// first's local communicator.
pub(crate) fn adopt_inter(st: &State, inter: Comm, local: Comm) -> ch4::Result<CommRef> {
    let vci = match &st.rank {
        Rank::Single(_) => 0,
        Rank::Multiple(u) => u
            .context()
            .vci_of_context(ch4_core::inter::binding_context(&inter)),
    };
    let mut dev = st.device(vci)?;
    let l = dev.adopt_comm(local)?;
    let id = match dev.adopt_comm(inter) {
        Ok(id) => id,
        Err(e) => {
            let _ = dev.comm_free(l);
            return Err(e);
        }
    };
    dev.set_inter_local(id, l)?;
    Ok(CommRef { id, vci })
}

/// `MPI_Comm_split` on intercommunicator `c` (also dup and create): the new handle, or
/// `MPI_COMM_NULL`.
pub(crate) fn split(
    st: &State,
    c: CommRef,
    color: c_int,
    key: c_int,
    fatal: bool,
) -> ch4::Result<Handle> {
    let new = on_device!(st, c.vci, |b| ch4_core::inter::split(b, c.id, color, key))?;
    Ok(match new {
        None => abi::COMM_NULL,
        Some((inter, local)) => {
            let n = adopt_inter(st, inter, local)?;
            st.add_comm(n.id, n.vci, fatal)
        }
    })
}

/// `MPI_Comm_create` on intercommunicator `c`: the members of `group` (a subgroup of the
/// local group) with those the other group named; a split by membership, ordered as `group`.
pub(crate) fn create(
    st: &State,
    c: CommRef,
    group: &ch4_core::rankmap::Group,
    fatal: bool,
) -> ch4::Result<Handle> {
    let (me, local) = {
        let dev = st.device(c.vci)?;
        (dev.gpid(), dev.comm_group(c.id)?)
    };
    for r in 0..group.size() as c_int {
        if group.gpid(r).and_then(|g| local.rank_of(g)).is_none() {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                format!("group member {r} is not in the intercommunicator's local group"),
            ));
        }
    }
    let (color, key) = match group.rank_of(me) {
        Some(r) => (0, r),
        None => (abi::UNDEFINED, 0),
    };
    split(st, c, color, key, fatal)
}

/// `MPI_Comm_dup` on intercommunicator `c`.
pub(crate) fn dup(st: &State, c: CommRef, fatal: bool) -> ch4::Result<Handle> {
    let rank = st.device(c.vci)?.rank(c.id)?;
    split(st, c, 0, rank, fatal)
}

/// The intercommunicator of the members of `local` (an intracommunicator) with the group
/// whose leader is `remote_leader` of `peer`, reached by leader `local_leader` of `local`
/// with `tag` (`MPI_Intercomm_create`'s steps, each on its communicator's VCI).
fn create_inter(
    st: &State,
    local: CommRef,
    local_leader: c_int,
    peer: Handle,
    remote_leader: c_int,
    tag: c_int,
) -> ch4::Result<CommRef> {
    check_intra(st, local, "MPI_Intercomm_create's local_comm")?;
    let (me, size) = {
        let dev = st.device(local.vci)?;
        (dev.rank(local.id)?, dev.size(local.id)?)
    };
    if !(0..size).contains(&local_leader) {
        return Err(ch4::Error::new(
            ErrorKind::Rank,
            format!("local leader {local_leader} outside a communicator of {size}"),
        ));
    }
    let (recv, group) = on_device!(st, local.vci, |b| ch4_core::inter::create_local(
        b, local.id
    ))?;
    let mut failed = None;
    let remote = if me == local_leader {
        let exchanged = st.comm(peer).and_then(|p| {
            let mine = ch4_core::inter::describe(recv, &group.group);
            on_device!(st, p.vci, |b| ch4_core::inter::exchange_over_peer(
                b,
                p.id,
                remote_leader,
                tag,
                &mine
            ))
        });
        // A leader whose exchange failed still tells its group, with an empty description
        // that fails everyone's call rather than leaving them waiting.
        Some(exchanged.unwrap_or_else(|e| {
            failed = Some(e);
            Vec::new()
        }))
    } else {
        None
    };
    let inter = on_device!(st, local.vci, |b| ch4_core::inter::create_finish(
        b,
        local.id,
        local_leader,
        remote,
        recv,
        &group
    ));
    if let Some(e) = failed {
        return Err(e);
    }
    adopt_inter(st, inter?, group)
}

/// `MPI_Intercomm_create`: collective over `local_comm`; the leaders meet over `peer_comm`
/// (significant at `local_leader` only) with `tag`.
///
/// # Safety
/// `newintercomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Intercomm_create(
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut Handle,
) -> c_int {
    let code = call(local_comm, "MPI_Intercomm_create", |st| {
        if newintercomm.is_null() {
            return Err(null_arg("the new intercommunicator"));
        }
        let (c, fatal) = parent(st, local_comm)?;
        let new = create_inter(st, c, local_leader, peer_comm, remote_leader, tag)?;
        let h = st.add_comm(new.id, new.vci, fatal);
        // SAFETY: checked non-null.
        unsafe { newintercomm.write(h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::errors::inherit_after(code, local_comm, newintercomm) }
}

/// A tag for the exchanges of `MPI_Intercomm_create_from_groups` from its string tag (FNV-1a,
/// folded below 2^15, the least tag upper bound MPI allows): the same string gives the same
/// tag at every member; two different strings in flight at once between the same processes
/// and folding together are still told apart by their order.
fn string_tag(s: &[u8]) -> c_int {
    let mut h: u32 = 0x811c_9dc5;
    for &b in s {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h % 32768) as c_int
}

/// `MPI_Intercomm_create_from_groups` (MPI 4.1 section 7.6.2): here over groups of
/// `MPI_COMM_WORLD`'s processes (sessions and their process sets are not implemented). The
/// local group makes a communicator of its own over `MPI_COMM_WORLD` (as
/// `MPI_Comm_create_group` does), and the leaders meet over `MPI_COMM_WORLD` with a tag made
/// from `stringtag`; the result takes `errhandler`.
///
/// # Safety
/// `stringtag` is a NUL-terminated string; `newintercomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Intercomm_create_from_groups(
    local_group: Handle,
    local_leader: c_int,
    remote_group: Handle,
    remote_leader: c_int,
    stringtag: *const c_char,
    info: Handle,
    errhandler: Handle,
    newintercomm: *mut Handle,
) -> c_int {
    let _ = info;
    let code = call(abi::COMM_WORLD, "MPI_Intercomm_create_from_groups", |st| {
        if newintercomm.is_null() {
            return Err(null_arg("the new intercommunicator"));
        }
        if stringtag.is_null() {
            return Err(null_arg("the string tag"));
        }
        // SAFETY: the caller's contract: a NUL-terminated string.
        let tag = string_tag(unsafe { CStr::from_ptr(stringtag) }.to_bytes());
        let (lg, rg) = (group_in(st, local_group)?, group_in(st, remote_group)?);
        let leader_gpid = rg.gpid(remote_leader).ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Rank,
                format!(
                    "remote leader {remote_leader} outside a group of {}",
                    rg.size()
                ),
            )
        })?;
        let world = st.comm(abi::COMM_WORLD)?;
        let local = on_device!(st, world.vci, |b| ch4_core::coll::new_create_group(
            b, world.id, &lg, tag
        ))?
        .ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Arg,
                "the calling process is not in the local group",
            )
        })?;
        let local = st.adopt_comm(local)?;
        // The world's ranks are the process ids.
        let made = create_inter(
            st,
            local,
            local_leader,
            abi::COMM_WORLD,
            leader_gpid as c_int,
            tag,
        );
        st.device(local.vci)?.comm_free(local.id)?;
        let new = made?;
        let h = st.add_comm(new.id, new.vci, true);
        // SAFETY: checked non-null.
        unsafe { newintercomm.write(h) };
        Ok(())
    });
    if code != abi::class::SUCCESS {
        return code;
    }
    // SAFETY: the caller's contract; written above.
    let h = unsafe { newintercomm.read() };
    crate::errors::MPI_Comm_set_errhandler(h, errhandler)
}

/// `MPI_Intercomm_merge`: the intracommunicator of both groups, the group whose members
/// passed `high` false first (see `ch4_core::inter::merge`).
///
/// # Safety
/// `newintracomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Intercomm_merge(
    intercomm: Handle,
    high: c_int,
    newintracomm: *mut Handle,
) -> c_int {
    let code = call(intercomm, "MPI_Intercomm_merge", |st| {
        if newintracomm.is_null() {
            return Err(null_arg("the new intracommunicator"));
        }
        let (c, fatal) = parent(st, intercomm)?;
        if remote_size(st, c)?.is_none() {
            return Err(ch4::Error::new(
                ErrorKind::Comm,
                "MPI_Intercomm_merge takes an intercommunicator",
            ));
        }
        let new = on_device!(st, c.vci, |b| ch4_core::inter::merge(b, c.id, high != 0))?;
        let new = st.adopt_comm(new)?;
        let h = st.add_comm(new.id, new.vci, fatal);
        // SAFETY: checked non-null.
        unsafe { newintracomm.write(h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::errors::inherit_after(code, intercomm, newintracomm) }
}

/// `MPI_Comm_test_inter`.
///
/// # Safety
/// `flag` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_test_inter(comm: Handle, flag: *mut c_int) -> c_int {
    call(comm, "MPI_Comm_test_inter", |st| {
        if flag.is_null() {
            return Err(null_arg("the flag"));
        }
        let inter = remote_size(st, st.comm(comm)?)?.is_some();
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(flag, inter as c_int) };
        Ok(())
    })
}

/// `MPI_Comm_remote_size`: an error for an intracommunicator.
///
/// # Safety
/// `size` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
    call(comm, "MPI_Comm_remote_size", |st| {
        if size.is_null() {
            return Err(null_arg("the size"));
        }
        let n = remote_size(st, st.comm(comm)?)?.ok_or_else(|| not_inter("remote_size"))?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(size, n) };
        Ok(())
    })
}

/// `MPI_Comm_remote_group`: an error for an intracommunicator.
///
/// # Safety
/// `group` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_remote_group(comm: Handle, group: *mut Handle) -> c_int {
    call(comm, "MPI_Comm_remote_group", |st| {
        if group.is_null() {
            return Err(null_arg("the group"));
        }
        let c = st.comm(comm)?;
        let g = st
            .device(c.vci)?
            .comm_remote_group(c.id)?
            .ok_or_else(|| not_inter("remote_group"))?;
        let h = group_out(st, g);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(group, h) };
        Ok(())
    })
}

fn not_inter(what: &str) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Comm,
        format!("MPI_Comm_{what} takes an intercommunicator"),
    )
}

/// `MPI_Comm_idup`: the new communicator's handle is written at once and the communicator
/// is usable when the request completes; a schedule agrees on its context id meanwhile
/// (`ch4_core::Device::comm_idup_start`), so the members need not call at the same moment
/// and may start other collectives first (MPICH's `comm_idup` and `comm_idup_overlap`
/// wait for each other that way). The attributes and the topology are copied at the call.
///
/// # Safety
/// `newcomm` and `request` are valid for writes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_idup(
    comm: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { idup("MPI_Comm_idup", comm, abi::INFO_NULL, newcomm, request) }
}

/// `MPI_Comm_idup_with_info`: [`MPI_Comm_idup`]; the hints are checked as
/// `MPI_Comm_dup_with_info` checks them, and the new communicator stays on its parent's VCI
/// (a `ch4_vci` hint is not applied: its agreement would have to wait for every member).
///
/// # Safety
/// `newcomm` and `request` are valid for writes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_idup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { idup("MPI_Comm_idup_with_info", comm, info, newcomm, request) }
}

/// Both forms of `MPI_Comm_idup`.
///
/// # Safety
/// `newcomm` and `request` are valid for writes.
unsafe fn idup(
    func: &'static str,
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    let code = call(comm, func, |st| {
        if newcomm.is_null() || request.is_null() {
            return Err(null_arg("the new communicator or the request"));
        }
        if info != abi::INFO_NULL {
            crate::info::value(info, crate::info::VCI_KEY)?;
        }
        let (c, fatal) = parent(st, comm)?;
        let (id, req) = st.device(c.vci)?.comm_idup_start(c.id)?;
        let h = st.add_comm(id, c.vci, fatal);
        crate::comm::copy_topology(st, comm, h)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            newcomm.write(h);
            request.write(abi::request_out(crate::state::DevReq::new(req, c.vci)));
        }
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::attributes::after_comm_dup(code, comm, newcomm) }
}
