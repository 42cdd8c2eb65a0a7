//! Groups, from the standard's chapter "Groups, Contexts, Communicators, and Caching" (its
//! "Group Management"): `MPI_Comm_group`, `MPI_Group_size`, `MPI_Group_rank`,
//! `MPI_Group_translate_ranks`, `MPI_Group_compare`, `MPI_Group_incl`, `MPI_Group_excl`,
//! `MPI_Group_range_incl`, `MPI_Group_range_excl`, `MPI_Group_union`,
//! `MPI_Group_intersection`, `MPI_Group_difference` and `MPI_Group_free`.
//!
//! A group handle is an index into the library's table of `ch4_core` [`Group`]s (with bit 59
//! set); `MPI_GROUP_EMPTY` is the predefined empty group. A group is only a list of processes,
//! which the library keeps itself; the device sees one only when a communicator is made from
//! it (`MPI_Comm_create`, in `comm`, which also compares communicators as groups).

use std::ffi::c_int;

use ch4_core::rankmap::Group;
use ch4_core::ErrorKind;

use crate::abi::{self, Handle};
use crate::call::{call, null_arg, put};
use crate::state::State;

use crate::abi::{GROUP_EMPTY, GROUP_NULL, IDENT, SIMILAR, UNEQUAL};

const GROUP_BIT: u64 = 1 << 59;

pub(crate) fn group_in(st: &State, h: Handle) -> ch4::Result<Group> {
    if h == GROUP_EMPTY {
        return ch4_core::rankmap::RankMap::from_gpids(&[])
            .map(|m| Group::from_map(std::sync::Arc::new(m)));
    }
    abi::index_of(h, GROUP_BIT)
        .and_then(|i| st.groups.cloned(i))
        .ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Arg,
                format!("{h:#x} is not a group of this process (freed, or never made)"),
            )
        })
}

pub(crate) fn group_out(st: &State, g: Group) -> Handle {
    if g.size() == 0 {
        return GROUP_EMPTY;
    }
    abi::indexed(GROUP_BIT, st.groups.insert(g))
}

/// The members of `g` in rank order.
fn members(g: &Group) -> Vec<u32> {
    (0..g.size() as c_int).filter_map(|r| g.gpid(r)).collect()
}

/// How two groups compare (`MPI_Group_compare`).
pub(crate) fn compare(a: &Group, b: &Group) -> c_int {
    let (ma, mb) = (members(a), members(b));
    if ma == mb {
        return IDENT;
    }
    let (mut sa, mut sb) = (ma, mb);
    sa.sort_unstable();
    sb.sort_unstable();
    if sa == sb {
        SIMILAR
    } else {
        UNEQUAL
    }
}

/// `MPI_Comm_group`.
///
/// # Safety
/// `group` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_group(comm: Handle, group: *mut Handle) -> c_int {
    call(comm, "MPI_Comm_group", |st| {
        let c = st.comm(comm)?;
        let id = c.id;
        let g = st.device(c.vci)?.comm_group(id)?;
        let h = group_out(st, g);
        // SAFETY: the caller's contract.
        unsafe { put(group, h) };
        Ok(())
    })
}

/// `MPI_Group_size`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_size(group: Handle, size: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Group_size", |st| {
        let g = group_in(st, group)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, g.size() as c_int) };
        Ok(())
    })
}

/// `MPI_Group_rank`: `MPI_UNDEFINED` when the caller is not a member.
///
/// # Safety
/// `rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_rank(group: Handle, rank: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Group_rank", |st| {
        let g = group_in(st, group)?;
        let me = st.device(0)?.gpid();
        // SAFETY: the caller's contract.
        unsafe { put(rank, g.rank_of(me).unwrap_or(abi::UNDEFINED)) };
        Ok(())
    })
}

/// `MPI_Group_translate_ranks`: `MPI_UNDEFINED` for a process not in the second group,
/// `MPI_PROC_NULL` stays itself.
///
/// # Safety
/// `ranks1` has `n` entries and `ranks2` room for them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    group1: Handle,
    n: c_int,
    ranks1: *const c_int,
    group2: Handle,
    ranks2: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Group_translate_ranks", |st| {
        let (a, b) = (group_in(st, group1)?, group_in(st, group2)?);
        let n = usize::try_from(n).map_err(|_| ch4::Error::new(ErrorKind::Arg, "n < 0"))?;
        if n == 0 {
            return Ok(());
        }
        if ranks1.is_null() || ranks2.is_null() {
            return Err(null_arg("a rank array"));
        }
        // SAFETY: the caller's contract.
        let (from, to) = unsafe {
            (
                std::slice::from_raw_parts(ranks1, n),
                std::slice::from_raw_parts_mut(ranks2, n),
            )
        };
        for (f, t) in from.iter().zip(to.iter_mut()) {
            *t = if *f == abi::PROC_NULL {
                abi::PROC_NULL
            } else {
                let g = a.gpid(*f).ok_or_else(|| {
                    ch4::Error::new(
                        ErrorKind::Rank,
                        format!("rank {f} is not in the first group"),
                    )
                })?;
                b.rank_of(g).unwrap_or(abi::UNDEFINED)
            };
        }
        Ok(())
    })
}

/// `MPI_Group_compare`.
///
/// # Safety
/// `result` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_compare(
    group1: Handle,
    group2: Handle,
    result: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Group_compare", |st| {
        let r = compare(&group_in(st, group1)?, &group_in(st, group2)?);
        // SAFETY: the caller's contract.
        unsafe { put(result, r) };
        Ok(())
    })
}

/// Makes a group from `make` over `group`'s, writing its handle.
///
/// # Safety
/// `newgroup` is writable.
unsafe fn derive(
    func: &'static str,
    newgroup: *mut Handle,
    make: impl FnOnce(&State) -> ch4::Result<Group>,
) -> c_int {
    call(abi::COMM_WORLD, func, |st| {
        if newgroup.is_null() {
            return Err(null_arg("the new group"));
        }
        let g = make(st)?;
        let h = group_out(st, g);
        // SAFETY: checked non-null.
        unsafe { newgroup.write(h) };
        Ok(())
    })
}

/// # Safety
/// `ranks` has `n` entries.
pub(crate) unsafe fn rank_list<'a>(n: c_int, ranks: *const c_int) -> ch4::Result<&'a [c_int]> {
    let n = usize::try_from(n).map_err(|_| ch4::Error::new(ErrorKind::Arg, "n < 0"))?;
    if n == 0 {
        return Ok(&[]);
    }
    if ranks.is_null() {
        return Err(null_arg("the ranks"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ranks, n) })
}

/// `MPI_Group_incl`.
///
/// # Safety
/// `ranks` has `n` entries; `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_incl(
    group: Handle,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_incl", newgroup, |st| {
            group_in(st, group)?.incl(rank_list(n, ranks)?)
        })
    }
}

/// `MPI_Group_excl`.
///
/// # Safety
/// `ranks` has `n` entries; `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_excl(
    group: Handle,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_excl", newgroup, |st| {
            group_in(st, group)?.excl(rank_list(n, ranks)?)
        })
    }
}

/// The ranks `n` triplets (first, last, stride) of `ranges` name, in order (MPI 4.1 section
/// 7.3.2, `MPI_Group_range_incl`): first, first + stride, ... as far as last. A stride of 0,
/// or one that leads away from `last`, is `MPI_ERR_ARG`; a first or last rank outside a
/// group of `size` is `MPI_ERR_RANK` (as MPICH checks them). Whether a rank repeats is left
/// to `Group::incl` and `Group::excl`.
///
/// # Safety
/// `ranges` has `n` triplets.
unsafe fn expand_ranges(n: c_int, ranges: *const [c_int; 3], size: u32) -> ch4::Result<Vec<c_int>> {
    let n = usize::try_from(n).map_err(|_| ch4::Error::new(ErrorKind::Arg, "n < 0"))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if ranges.is_null() {
        return Err(null_arg("the ranges"));
    }
    // SAFETY: the caller's contract.
    let triplets = unsafe { std::slice::from_raw_parts(ranges, n) };
    let size = i64::from(size);
    let mut out = Vec::new();
    for &[first, last, stride] in triplets {
        let (first, last, stride) = (i64::from(first), i64::from(last), i64::from(stride));
        if stride == 0 || (last - first) * stride.signum() < 0 {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                format!("the range ({first}, {last}, {stride}) never reaches its last rank"),
            ));
        }
        if let Some(r) = [first, last].into_iter().find(|r| !(0..size).contains(r)) {
            return Err(ch4::Error::new(
                ErrorKind::Rank,
                format!("rank {r} of a range is outside the group of size {size}"),
            ));
        }
        // Ranges that name more than `size` ranks repeat one, which `incl` and `excl` refuse
        // anyway: refused here, before the list is made.
        let count = (last - first) / stride + 1;
        if out.len() as i64 + count > size {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                "the ranges name some ranks more than once",
            ));
        }
        out.extend((0..count).map(|i| (first + i * stride) as c_int));
    }
    Ok(out)
}

/// `MPI_Group_range_incl`: the ranks of the ranges, in their order.
///
/// # Safety
/// `ranges` has `n` triplets; `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_range_incl(
    group: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_range_incl", newgroup, |st| {
            let g = group_in(st, group)?;
            g.incl(&expand_ranges(n, ranges, g.size())?)
        })
    }
}

/// `MPI_Group_range_excl`: the group without the ranks of the ranges.
///
/// # Safety
/// `ranges` has `n` triplets; `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_range_excl(
    group: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_range_excl", newgroup, |st| {
            let g = group_in(st, group)?;
            g.excl(&expand_ranges(n, ranges, g.size())?)
        })
    }
}

/// `MPI_Group_union`.
///
/// # Safety
/// `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_union(g1: Handle, g2: Handle, newgroup: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_union", newgroup, |st| {
            Ok(group_in(st, g1)?.union(&group_in(st, g2)?))
        })
    }
}

/// `MPI_Group_intersection`.
///
/// # Safety
/// `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_intersection(
    g1: Handle,
    g2: Handle,
    newgroup: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_intersection", newgroup, |st| {
            Ok(group_in(st, g1)?.intersection(&group_in(st, g2)?))
        })
    }
}

/// `MPI_Group_difference`.
///
/// # Safety
/// `newgroup` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_difference(
    g1: Handle,
    g2: Handle,
    newgroup: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive("MPI_Group_difference", newgroup, |st| {
            Ok(group_in(st, g1)?.difference(&group_in(st, g2)?))
        })
    }
}

/// `MPI_Group_free`: the handle becomes `MPI_GROUP_NULL`.
///
/// # Safety
/// `group` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Group_free(group: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Group_free", |st| {
        if group.is_null() {
            return Err(null_arg("the group"));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { group.read() };
        if h != GROUP_EMPTY {
            group_in(st, h)?;
            if let Some(i) = abi::index_of(h, GROUP_BIT) {
                st.groups.remove(i);
            }
        }
        // SAFETY: the caller's contract.
        unsafe { group.write(GROUP_NULL) };
        Ok(())
    })
}
