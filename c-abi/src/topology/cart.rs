//! Cartesian topologies, from the standard's chapter "Process Topologies": `MPI_Cart_create`,
//! `MPI_Cart_coords`, `MPI_Cart_rank`, `MPI_Cart_shift`, `MPI_Cart_get`, `MPI_Cartdim_get`,
//! `MPI_Topo_test` and `MPI_Dims_create`.
//!
//! A Cartesian communicator is a duplicate (or, with fewer grid points than processes, a
//! split) of its parent that remembers its dimensions and periodicity; ranks map to coordinates
//! in row-major order and `reorder` is not used. The grid is the library's own (kept in the
//! communicator's slot of `state`), not the device's: the device sees an ordinary communicator.

use std::ffi::c_int;

use ch4_core::ErrorKind;

use crate::abi::{self, Handle, CART};
use crate::call::{call, null_arg, on_device, put};
use crate::groups::rank_list;
use crate::state::{Cart, State};

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
        let (c, fatal) = crate::comm::parent(st, comm_old)?;
        let id = c.id;
        let (me, size) = {
            let dev = st.device(c.vci)?;
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
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_split(b, id, color, me))?;
        let h = match new {
            Some(c) => {
                let c = st.adopt_comm(c)?;
                let h = st.add_comm(c.id, c.vci, fatal);
                st.with_slot(h, |s| {
                    s.cart = Some(Cart {
                        dims: d.to_vec(),
                        periods: p.iter().map(|&x| x != 0).collect(),
                    })
                })?;
                h
            }
            None => abi::COMM_NULL,
        };
        // SAFETY: checked non-null.
        unsafe { comm_cart.write(h) };
        Ok(())
    })
}

fn cart_of(st: &State, comm: Handle) -> ch4::Result<Cart> {
    st.with_slot(comm, |s| s.cart.clone())?.ok_or_else(|| {
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
        let cr = st.comm(comm)?;
        let me = st.device(cr.vci)?.rank(cr.id)?;
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
        let cr = st.comm(comm)?;
        let me = st.device(cr.vci)?.rank(cr.id)?;
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
        let t = if st.with_slot(comm, |s| s.cart.is_some())? {
            CART
        } else {
            abi::UNDEFINED
        };
        // SAFETY: the caller's contract.
        unsafe { put(status, t) };
        Ok(())
    })
}

/// `MPI_Dims_create`: a balanced factorization of `nnodes` into `ndims` dimensions, the
/// nonzero entries of `dims` kept.
///
/// # Safety
/// `dims` has `ndims` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Dims_create", |_| {
        let n = usize::try_from(ndims)
            .map_err(|_| ch4::Error::new(ErrorKind::Arg, "ndims is negative"))?;
        if n == 0 {
            return Ok(());
        }
        if dims.is_null() {
            return Err(null_arg("dims"));
        }
        // SAFETY: the caller's contract.
        let d = unsafe { std::slice::from_raw_parts_mut(dims, n) };
        dims_create(nnodes, d)
    })
}

fn dims_create(nnodes: c_int, d: &mut [c_int]) -> ch4::Result<()> {
    if nnodes <= 0 || d.iter().any(|&x| x < 0) {
        return Err(ch4::Error::new(
            ErrorKind::Arg,
            "nnodes must be positive and dims not negative",
        ));
    }
    let fixed: i64 = d
        .iter()
        .filter(|&&x| x > 0)
        .map(|&x| i64::from(x))
        .product();
    if i64::from(nnodes) % fixed != 0 {
        return Err(ch4::Error::new(
            ErrorKind::Arg,
            format!("{nnodes} processes do not divide by the fixed dimensions' product {fixed}"),
        ));
    }
    let free: Vec<usize> = (0..d.len()).filter(|&i| d[i] == 0).collect();
    if free.is_empty() {
        return if fixed == i64::from(nnodes) {
            Ok(())
        } else {
            Err(ch4::Error::new(
                ErrorKind::Arg,
                "dims do not multiply to nnodes",
            ))
        };
    }
    let mut rest = i64::from(nnodes) / fixed;
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= rest {
        while rest % p == 0 {
            factors.push(p);
            rest /= p;
        }
        p += 1;
    }
    if rest > 1 {
        factors.push(rest);
    }
    let mut out = vec![1i64; free.len()];
    for f in factors.into_iter().rev() {
        if let Some(m) = out.iter_mut().min() {
            *m *= f;
        }
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    for (i, v) in free.into_iter().zip(out) {
        d[i] = v as c_int;
    }
    Ok(())
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

    #[test]
    fn dims_are_balanced_and_keep_the_fixed_ones() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 3, 0];
        dims_create(24, &mut d).unwrap();
        assert_eq!(d, [4, 3, 2]);
        let mut d = [0, 0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1, 1]);
        assert!(dims_create(10, &mut [3, 0]).is_err());
    }
}
