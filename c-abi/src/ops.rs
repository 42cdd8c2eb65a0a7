//! Reduction operations, the standard's "User-Defined Reduction Operations": `MPI_Op_create`,
//! `MPI_Op_free`, `MPI_Op_commutative` and `MPI_Reduce_local`, and the fold every reduction
//! applies, predefined or the program's.
//!
//! A program's operation is its C function, `MPI_User_function`, which computes
//! `inoutvec[i] = invec[i] op inoutvec[i]`. The device's reductions fold `other` into `acc` as
//! `acc = acc op other`, where `acc` holds the lower ranks (see `ch4_core::coll::reduce`): for
//! an operation that commutes, the function runs in place with `acc` as its `inoutvec`; for one
//! that does not, on a copy of `other`, which then becomes `acc`, so the order is the one MPI
//! prescribes. The reductions that would change that order (a tree rooted elsewhere than rank
//! 0) run in rank order for such an operation (`ch4_core::coll::reduce_in_order`).

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use crate::abi::{self, op, Handle};
use crate::call::{call, null_arg};
use crate::datatype::{self, Fold};
use crate::state::State;

/// The C type of a program's operation (`MPI_User_function` in `mpi.h`).
pub(crate) type UserFunction = unsafe extern "C" fn(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    dt: *mut Handle,
);

/// An operation the program created.
#[derive(Clone, Copy)]
pub(crate) struct UserOp {
    function: UserFunction,
    commutes: bool,
}

/// Operations the program makes are this bit plus their index in the library's table (no
/// other handle kind uses it, and it is far above the predefined operations).
const OP_BIT: u64 = 1 << 58;

fn op_out(i: usize) -> Handle {
    abi::indexed(OP_BIT, i)
}

fn op_in(h: Handle) -> Option<usize> {
    abi::index_of(h, OP_BIT)
}

fn bad_op(h: Handle) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Arg,
        format!("operation {h:#x} is not a reduction operation (or was freed)"),
    )
}

/// The operation behind `h`, when the program created it.
fn user_op(st: &State, h: Handle) -> ch4::Result<Option<UserOp>> {
    match op_in(h) {
        Some(i) => st.ops.cloned(i).map(Some).ok_or_else(|| bad_op(h)),
        None => Ok(None),
    }
}

/// The fold of operation `op_h` over elements of `dt` for the device's reductions, and
/// whether the operation commutes (every predefined one does).
pub(crate) fn reduction(st: &State, op_h: Handle, dt: Handle) -> ch4::Result<(Fold, bool)> {
    let Some(user) = user_op(st, op_h)? else {
        return Ok((datatype::reduction(op_h, dt)?, true));
    };
    let Some(elem) = datatype::reduce_elem(dt) else {
        return Ok((derived_reduction(st, user, dt)?, user.commutes));
    };
    let mut copy: Vec<u8> = Vec::new();
    let fold = move |acc: &mut [u8], other: &[u8]| {
        let n = acc.len().min(other.len());
        let mut len = c_int::try_from(n / elem).unwrap_or(c_int::MAX);
        let mut dt = dt;
        if user.commutes {
            // SAFETY: the program gave MPI_Op_create a function of MPI_User_function's type;
            // both vectors hold `len` elements of `dt`, `inoutvec` is written, `invec` only
            // read (the standard's rule for the function), and both outlive the call.
            unsafe {
                (user.function)(
                    other.as_ptr().cast_mut().cast(),
                    acc.as_mut_ptr().cast(),
                    &mut len,
                    &mut dt,
                )
            };
        } else {
            copy.clear();
            copy.extend_from_slice(&other[..n]);
            // SAFETY: as above, with `copy` (a private copy of `other`) written.
            unsafe {
                (user.function)(
                    acc.as_mut_ptr().cast(),
                    copy.as_mut_ptr().cast(),
                    &mut len,
                    &mut dt,
                )
            };
            acc[..n].copy_from_slice(&copy);
        }
    };
    Ok((Box::new(fold), user.commutes))
}

/// The fold of the program's operation `user` over elements of derived datatype `dt`: the
/// device's reductions hold packed bytes, while the function expects elements laid out as the
/// datatype describes them (MPI 4.1, section 6.9.5), so both operands are unpacked into
/// scratch buffers in the datatype's layout, the function runs there, and the result is
/// packed back.
fn derived_reduction(st: &State, user: UserOp, dt: Handle) -> ch4::Result<Fold> {
    let d = crate::derived::desc(st, dt)?;
    let (ty, size) = (d.ty.clone(), d.size);
    if size == 0 {
        return Ok(Box::new(|_: &mut [u8], _: &[u8]| {}));
    }
    // The blocks of `n` elements (offset from element 0, length) in typemap order, kept for
    // the `n` of the last call: every fold of one reduction has the same.
    let mut layout: (usize, Vec<(isize, usize)>, isize, usize) = (0, Vec::new(), 0, 0);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let fold = move |acc: &mut [u8], other: &[u8]| {
        let n = acc.len().min(other.len()) / size;
        if n == 0 {
            return;
        }
        if layout.0 != n || layout.1.is_empty() {
            let mut blocks = Vec::new();
            let walked = ty.for_merged_blocks(n, &mut |o, l| {
                blocks.push((o, l));
                Ok(())
            });
            if walked.is_err() {
                return;
            }
            let low = blocks.iter().map(|&(o, _)| o).min().unwrap_or(0);
            let high = blocks
                .iter()
                .map(|&(o, l)| o + l as isize)
                .max()
                .unwrap_or(0);
            layout = (n, blocks, low, (high - low) as usize);
        }
        let (_, blocks, low, span) = &layout;
        let unpack = |packed: &[u8], out: &mut Vec<u8>| {
            out.clear();
            out.resize(*span, 0);
            let mut at = 0;
            for &(o, l) in blocks {
                let p = (o - low) as usize;
                out[p..p + l].copy_from_slice(&packed[at..at + l]);
                at += l;
            }
        };
        unpack(acc, &mut a);
        unpack(other, &mut b);
        let mut len = c_int::try_from(n).unwrap_or(c_int::MAX);
        let mut dt = dt;
        // The function computes `invec op inoutvec` into `inoutvec`: for `acc op other`,
        // `acc` is the first operand when the operation does not commute.
        let (invec, inout) = if user.commutes {
            (&mut b, &mut a)
        } else {
            (&mut a, &mut b)
        };
        // SAFETY: the program gave MPI_Op_create a function of MPI_User_function's type; both
        // scratch buffers hold `len` elements of `dt` laid out as `dt` says, element 0 at
        // `-low` from their start (`low` is the offset of the lowest block, so the function
        // touches nothing outside them), `inoutvec` is written and `invec` only read, and
        // both outlive the call.
        unsafe {
            (user.function)(
                invec.as_mut_ptr().wrapping_offset(-low).cast(),
                inout.as_mut_ptr().wrapping_offset(-low).cast(),
                &mut len,
                &mut dt,
            )
        };
        let result: &Vec<u8> = inout;
        let mut at = 0;
        for &(o, l) in blocks {
            let p = (o - low) as usize;
            acc[at..at + l].copy_from_slice(&result[p..p + l]);
            at += l;
        }
    };
    Ok(Box::new(fold))
}

/// `MPI_Op_create`.
///
/// # Safety
/// `user_fn` is a function of `MPI_User_function`'s type (or null, which is refused); `op` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_create(
    user_fn: Option<UserFunction>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_create", |st| {
        let function = user_fn.ok_or_else(|| null_arg("the user function"))?;
        if op.is_null() {
            return Err(null_arg("the operation"));
        }
        let i = st.ops.insert(UserOp {
            function,
            commutes: commute != 0,
        });
        // SAFETY: checked non-null; the caller's contract.
        unsafe { op.write(op_out(i)) };
        Ok(())
    })
}

/// `MPI_Op_free`: frees an operation the program created and sets the handle to
/// `MPI_OP_NULL`; a predefined one is refused.
///
/// # Safety
/// `op` is a readable and writable handle.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_free(op: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_free", |st| {
        if op.is_null() {
            return Err(null_arg("the operation"));
        }
        // SAFETY: checked non-null; the caller's contract.
        let h = unsafe { op.read() };
        let i = op_in(h).ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Arg,
                format!("operation {h:#x} is predefined (or not an operation): it cannot be freed"),
            )
        })?;
        st.ops.remove(i).ok_or_else(|| bad_op(h))?;
        // SAFETY: as above.
        unsafe { op.write(op::NULL) };
        Ok(())
    })
}

/// `MPI_Op_commutative`.
///
/// # Safety
/// `commute` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_commutative(op: Handle, commute: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Op_commutative", |st| {
        if commute.is_null() {
            return Err(null_arg("the result"));
        }
        let commutes = match user_op(st, op)? {
            Some(u) => u.commutes,
            None if op::is_predefined(op) => true,
            None => return Err(bad_op(op)),
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { commute.write(c_int::from(commutes)) };
        Ok(())
    })
}

/// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf`, element by element, in this process.
///
/// # Safety
/// Both buffers hold `count` elements of `datatype`; `inoutbuf` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Reduce_local", |st| {
        // SAFETY: the caller's contract.
        let input = unsafe { datatype::reduce_in(inbuf, count, datatype) }?;
        // SAFETY: the caller's contract.
        let inout = unsafe { datatype::reduce_out(inoutbuf, count, datatype) }?;
        if let Some(user) = user_op(st, op)? {
            let mut len = count;
            let mut dt = datatype;
            // SAFETY: as in `reduction`: the program's MPI_User_function on its own buffers.
            unsafe {
                (user.function)(
                    input.as_ptr().cast_mut().cast(),
                    inout.as_mut_ptr().cast(),
                    &mut len,
                    &mut dt,
                )
            };
            return Ok(());
        }
        // Every predefined operation commutes: in op inout = inout op in.
        datatype::reduction(op, datatype)?(inout, input);
        Ok(())
    })
}
