//! Groups, communicator comparison and creation from a group, and Cartesian topologies.
//!
//! A group handle is an index into the library's table of `ch4_core` [`Group`]s (with bit 59
//! set); `MPI_GROUP_EMPTY` is the predefined empty group. A Cartesian communicator is a
//! duplicate (or, with fewer grid points than processes, a split) of its parent that
//! remembers its dimensions and periodicity; ranks map to coordinates in row-major order and
//! `reorder` is not used.

use std::ffi::c_int;

use ch4_core::rankmap::Group;
use ch4_core::ErrorKind;

use crate::abi::{self, Handle};
use crate::call::{call, null_arg, put};
use crate::state::{Cart, State};

use crate::abi::{CART, CONGRUENT, GROUP_EMPTY, GROUP_NULL, IDENT, SIMILAR, UNEQUAL};

const GROUP_BIT: u64 = 1 << 59;

fn group_in(st: &State, h: Handle) -> ch4::Result<Group> {
    if h == GROUP_EMPTY {
        return ch4_core::rankmap::RankMap::from_gpids(&[])
            .map(|m| Group::from_map(std::sync::Arc::new(m)));
    }
    let raw = h as u64;
    (raw & GROUP_BIT != 0 && raw >> 60 == 0)
        .then_some((raw & !GROUP_BIT) as usize)
        .and_then(|i| st.groups.get(i).and_then(Option::as_ref))
        .cloned()
        .ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Arg,
                format!("{h:#x} is not a group of this process (freed, or never made)"),
            )
        })
}

fn group_out(st: &mut State, g: Group) -> Handle {
    if g.size() == 0 {
        return GROUP_EMPTY;
    }
    let i = match st.groups.iter().position(Option::is_none) {
        Some(i) => {
            st.groups[i] = Some(g);
            i
        }
        None => {
            st.groups.push(Some(g));
            st.groups.len() - 1
        }
    };
    (i as u64 | GROUP_BIT) as Handle
}

/// The members of `g` in rank order.
fn members(g: &Group) -> Vec<u32> {
    (0..g.size() as c_int).filter_map(|r| g.gpid(r)).collect()
}

/// How two groups compare (`MPI_Group_compare`).
fn compare(a: &Group, b: &Group) -> c_int {
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
        let id = st.comm(comm)?;
        let g = st.device()?.comm_group(id)?;
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
        let me = st.device()?.gpid();
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
    make: impl FnOnce(&mut State) -> ch4::Result<Group>,
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
unsafe fn rank_list<'a>(n: c_int, ranks: *const c_int) -> ch4::Result<&'a [c_int]> {
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
            st.groups[((h as u64) & !GROUP_BIT) as usize] = None;
        }
        // SAFETY: the caller's contract.
        unsafe { group.write(GROUP_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_create`: `MPI_COMM_NULL` for processes outside `group`.
///
/// # Safety
/// `newcomm` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create(
    comm: Handle,
    group: Handle,
    newcomm: *mut Handle,
) -> c_int {
    call(comm, "MPI_Comm_create", |st| {
        let slot = st.slot(comm)?;
        let (id, fatal) = (slot.id, slot.fatal);
        let g = group_in(st, group)?;
        let new = st.device()?.comm_create(id, &g)?;
        let h = new.map_or(abi::COMM_NULL, |c| st.add_comm(c, fatal));
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    })
}

/// `MPI_Comm_compare`.
///
/// # Safety
/// `result` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_compare(
    comm1: Handle,
    comm2: Handle,
    result: *mut c_int,
) -> c_int {
    call(comm1, "MPI_Comm_compare", |st| {
        let (a, b) = (st.comm(comm1)?, st.comm(comm2)?);
        let r = if comm1 == comm2 {
            IDENT
        } else {
            let dev = st.device()?;
            match compare(&dev.comm_group(a)?, &dev.comm_group(b)?) {
                IDENT => CONGRUENT,
                other => other,
            }
        };
        // SAFETY: the caller's contract.
        unsafe { put(result, r) };
        Ok(())
    })
}

// ------------------------------------------------------------------ Cartesian topologies

/// `MPI_Cart_create`.
///
/// # Safety
/// `dims` and `periods` have `ndims` entries; `comm_cart` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut Handle,
) -> c_int {
    call(comm_old, "MPI_Cart_create", |st| {
        if comm_cart.is_null() {
            return Err(null_arg("the new communicator"));
        }
        // SAFETY: the caller's contract.
        let (d, p) = unsafe { (rank_list(ndims, dims)?, rank_list(ndims, periods)?) };
        if d.iter().any(|&x| x <= 0) {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                "a dimension is not positive",
            ));
        }
        let points: i64 = d.iter().map(|&x| i64::from(x)).product();
        let slot = st.slot(comm_old)?;
        let (id, fatal) = (slot.id, slot.fatal);
        let (me, size) = {
            let dev = st.device()?;
            (dev.rank(id)?, dev.size(id)?)
        };
        if points > i64::from(size) {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                format!("a grid of {points} points for {size} processes"),
            ));
        }
        let color = if i64::from(me) < points {
            0
        } else {
            abi::UNDEFINED
        };
        let new = st.device()?.comm_split(id, color, me)?;
        let h = match new {
            Some(c) => {
                let h = st.add_comm(c, fatal);
                st.slot(h)?.cart = Some(Cart {
                    dims: d.to_vec(),
                    periods: p.iter().map(|&x| x != 0).collect(),
                });
                h
            }
            None => abi::COMM_NULL,
        };
        // SAFETY: checked non-null.
        unsafe { comm_cart.write(h) };
        Ok(())
    })
}

fn cart_of(st: &mut State, comm: Handle) -> ch4::Result<Cart> {
    st.slot(comm)?.cart.clone().ok_or_else(|| {
        ch4::Error::new(
            ErrorKind::Comm,
            "the communicator has no Cartesian topology",
        )
    })
}

/// Row-major coordinates of `rank`.
fn coords_of(c: &Cart, rank: c_int) -> Vec<c_int> {
    let mut rest = rank;
    let mut out = vec![0; c.dims.len()];
    for i in (0..c.dims.len()).rev() {
        out[i] = rest % c.dims[i];
        rest /= c.dims[i];
    }
    out
}

/// The rank at `coords` (periodic dimensions wrap); `None` off a non-periodic edge.
fn rank_at(c: &Cart, coords: &[c_int]) -> Option<c_int> {
    let mut r = 0;
    for (i, &x) in coords.iter().enumerate() {
        let d = c.dims[i];
        let x = if c.periods[i] {
            x.rem_euclid(d)
        } else if (0..d).contains(&x) {
            x
        } else {
            return None;
        };
        r = r * d + x;
    }
    Some(r)
}

/// `MPI_Cart_coords`.
///
/// # Safety
/// `coords` has room for `maxdims` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_coords(
    comm: Handle,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    call(comm, "MPI_Cart_coords", |st| {
        let c = cart_of(st, comm)?;
        let points: c_int = c.dims.iter().product();
        if !(0..points).contains(&rank) {
            return Err(ch4::Error::new(
                ErrorKind::Rank,
                format!("rank {rank} is not in the grid"),
            ));
        }
        let xs = coords_of(&c, rank);
        if (maxdims as usize) < xs.len() || (!xs.is_empty() && coords.is_null()) {
            return Err(null_arg("room for the coordinates"));
        }
        for (i, x) in xs.into_iter().enumerate() {
            // SAFETY: the caller's contract: room for `maxdims` >= ndims entries.
            unsafe { coords.add(i).write(x) };
        }
        Ok(())
    })
}

/// `MPI_Cart_rank`.
///
/// # Safety
/// `coords` has ndims entries; `rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_rank(
    comm: Handle,
    coords: *const c_int,
    rank: *mut c_int,
) -> c_int {
    call(comm, "MPI_Cart_rank", |st| {
        let c = cart_of(st, comm)?;
        // SAFETY: the caller's contract.
        let xs = unsafe { rank_list(c.dims.len() as c_int, coords) }?;
        let r = rank_at(&c, xs).ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Rank,
                "coordinates outside a non-periodic dimension",
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(rank, r) };
        Ok(())
    })
}

/// `MPI_Cart_shift`: `MPI_PROC_NULL` off a non-periodic edge.
///
/// # Safety
/// `rank_source` and `rank_dest` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: Handle,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    call(comm, "MPI_Cart_shift", |st| {
        let c = cart_of(st, comm)?;
        let id = st.comm(comm)?;
        let me = st.device()?.rank(id)?;
        let d = usize::try_from(direction)
            .ok()
            .filter(|&d| d < c.dims.len())
            .ok_or_else(|| ch4::Error::new(ErrorKind::Arg, format!("direction {direction}")))?;
        let at = |delta: c_int| {
            let mut xs = coords_of(&c, me);
            xs[d] += delta;
            rank_at(&c, &xs).unwrap_or(abi::PROC_NULL)
        };
        // SAFETY: the caller's contract.
        unsafe {
            put(rank_source, at(-disp));
            put(rank_dest, at(disp));
        }
        Ok(())
    })
}

/// `MPI_Cartdim_get`.
///
/// # Safety
/// `ndims` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cartdim_get(comm: Handle, ndims: *mut c_int) -> c_int {
    call(comm, "MPI_Cartdim_get", |st| {
        let c = cart_of(st, comm)?;
        // SAFETY: the caller's contract.
        unsafe { put(ndims, c.dims.len() as c_int) };
        Ok(())
    })
}

/// `MPI_Cart_get`.
///
/// # Safety
/// The arrays have room for `maxdims` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_get(
    comm: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    call(comm, "MPI_Cart_get", |st| {
        let c = cart_of(st, comm)?;
        let id = st.comm(comm)?;
        let me = st.device()?.rank(id)?;
        let n = c.dims.len();
        if (maxdims as usize) < n {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                "maxdims is smaller than ndims",
            ));
        }
        let xs = coords_of(&c, me);
        for (i, x) in xs.into_iter().enumerate() {
            // SAFETY: the caller's contract: room for `maxdims` >= n entries (null skipped).
            unsafe {
                put(dims.wrapping_add(i), c.dims[i]);
                put(periods.wrapping_add(i), c_int::from(c.periods[i]));
                put(coords.wrapping_add(i), x);
            }
        }
        Ok(())
    })
}

/// `MPI_Topo_test`: `MPI_CART` or `MPI_UNDEFINED`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
    call(comm, "MPI_Topo_test", |st| {
        let t = if st.slot(comm)?.cart.is_some() {
            CART
        } else {
            abi::UNDEFINED
        };
        // SAFETY: the caller's contract.
        unsafe { put(status, t) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_row_major_and_periodic_dimensions_wrap() {
        let c = Cart {
            dims: vec![2, 3],
            periods: vec![false, true],
        };
        assert_eq!(coords_of(&c, 4), vec![1, 1]);
        assert_eq!(rank_at(&c, &[1, 1]), Some(4));
        assert_eq!(rank_at(&c, &[1, 3]), Some(3), "wraps");
        assert_eq!(rank_at(&c, &[2, 0]), None, "off the edge");
        for r in 0..6 {
            assert_eq!(rank_at(&c, &coords_of(&c, r)), Some(r));
        }
    }
}
