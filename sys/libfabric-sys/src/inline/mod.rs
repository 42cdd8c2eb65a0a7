//! libfabric's `static inline` calls, one module per header, in the headers' order.
//!
//! Each function is the C body translated: it loads the same ops table from the object and
//! calls the same entry with the arguments unchanged. The helpers here are the C macros those
//! bodies use: `container_of` ([`ep_of`]), `FI_CHECK_OP` ([`checked_op!`]), and the plain
//! `table->entry` load ([`op!`]). The shared safety contract is in the crate docs
//! (crate-level "Safety" section); every function's `# Safety` refers to it.

mod cm;
mod domain;
mod endpoint;
mod eq;
mod fabric;
mod rma;
mod tagged;

pub use cm::*;
pub use domain::*;
pub use endpoint::*;
pub use eq::*;
pub use fabric::*;
pub use rma::*;
pub use tagged::*;

use crate::{fid_ep, fid_t};

/// `$table->$entry` for a call: the function pointer in ops table `$table` (a raw pointer to
/// a `$ty`). Where C would jump to address 0 (a null table or entry: the object was not opened
/// for this operation, or the provider is broken), this panics instead.
///
/// Reads through `$table`, so it must be used in an `unsafe` block whose caller guarantees the
/// table pointer came from a live object (contract 1).
macro_rules! op {
    ($table:expr, $ty:ident . $entry:ident) => {{
        let table: *const $crate::$ty = $table;
        if table.is_null() {
            $crate::inline::missing_op(stringify!($ty), stringify!($entry))
        }
        match (*table).$entry {
            Some(f) => f,
            None => $crate::inline::missing_op(stringify!($ty), stringify!($entry)),
        }
    }};
}

/// `FI_CHECK_OP(table, $ty, $entry) ? table->$entry : NULL` (`rdma/fabric.h`): the entry only
/// if the table is there, was built by a provider that knows the entry (its `size` reaches
/// past the entry's offset: tables grow at the end across libfabric versions) and has it set.
///
/// The entry is read only after the size check, as in C, since an older provider's table may
/// end before it. Must be used in an `unsafe` block whose caller guarantees the table pointer
/// came from a live object (contract 1).
macro_rules! checked_op {
    ($table:expr, $ty:ident . $entry:ident) => {{
        let table: *const $crate::$ty = $table;
        if !table.is_null() && (*table).size > ::core::mem::offset_of!($crate::$ty, $entry) {
            (*table).$entry
        } else {
            None
        }
    }};
}

pub(crate) use checked_op;
pub(crate) use op;

/// The panic of [`op!`], out of line so that the call sites stay a test and a branch.
#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn missing_op(table: &str, entry: &str) -> ! {
    panic!("libfabric: {table}.{entry} is null (object not opened for this operation?)")
}

/// `container_of(fid, struct fid_ep, fid)` (`rdma/fabric.h`): the endpoint whose embedded
/// `fid` this is.
///
/// Only computes an address (nothing is read); `fid` must be `&(*ep).fid` of some `fid_ep`
/// for the result to be used, as in C.
#[inline(always)]
pub(crate) fn ep_of(fid: fid_t) -> *mut fid_ep {
    fid.wrapping_byte_sub(core::mem::offset_of!(fid_ep, fid))
        .cast::<fid_ep>()
}

/// `&obj->fid` for any fid-headed object pointer, without creating a reference.
macro_rules! fid_of {
    ($obj:expr) => {
        ::core::ptr::addr_of_mut!((*$obj).fid)
    };
}
pub(crate) use fid_of;
